"""Capacity curves with known answers, on the embedded simulator through `kvbench capacity`.

The workload (cases.py): sessions that re-send one 8,192-token context every turn with 5 s
of think time. A cache holding n contexts serves n live sessions from cache (TTFT of a hit:
a few ms) and thrashes beyond (LRU over sessions in turn order: every turn misses and
recomputes 8,192 tokens, ~0.5 s). The SLO, TTFT p90 <= 100 ms, separates the two."""

from __future__ import annotations

import json

import pytest
from capacity.cases import CONTEXT_TOKENS, write_sessions

from kvbench.cli import main

# reference-8b: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131,072 bytes per token
KV_BYTES_PER_TOKEN = 131_072
SLO = ["--ttft-p90-ms", "100"]


def _gb_for_sessions(n: int) -> float:
    """A host size that holds n contexts (plus half a page, so rounding cannot drop one)."""
    return 0.0 if n == 0 else round((n * CONTEXT_TOKENS + 32) * KV_BYTES_PER_TOKEN / 1e9, 6)


def _capacity(tmp_path, capsys, *args: str) -> dict:
    out = tmp_path / "out"
    main(["capacity", "--model", "reference-8b", "--hardware", "h200", "--bounds", "once", *args,
          "--output", str(out), "--format", "json"])
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "capacity.json").read_text())
    assert printed == written
    assert "p-capacity" in (out / "capacity.html").read_text()
    return written


def test_a_cache_that_fits_everything_gives_a_flat_curve(tmp_path, capsys):
    traces = write_sessions(tmp_path / "t", sessions=6)
    grid = [_gb_for_sessions(n) for n in (0, 2, 4, 6)]
    doc = _capacity(tmp_path, capsys, "--trace", str(traces), "--gpu-tokens",
                    str(7 * CONTEXT_TOKENS), "--budget-gb", str(grid[-1]),
                    *[a for g in grid for a in ("--host-gb", str(g))], *SLO)
    assert [p["max_sessions"] for p in doc["predicted"]] == [6, 6, 6, 6]
    assert doc["knee"]["host_gb"] == 0
    assert doc["knee"]["plateau"] is True
    # every size serves all 6 sessions: the answer is censored at the workload's size
    assert doc["knee"]["text"].startswith(
        "host 0 GB -> >= 6 sessions (the most the workload offers)")


def test_a_working_set_of_k_sessions_puts_the_knee_at_k(tmp_path, capsys):
    # 6 sessions, a GPU tier of 2 contexts; write-through host tier of n contexts: the cache
    # holds max(2, n) sessions, so the curve is 2, 2, 3, 4, 5, 6, 6, 6 and flat from 6.
    k = 6
    traces = write_sessions(tmp_path / "t", sessions=k)
    sizes = [0, 2, 3, 4, 5, 6, 7, 8]
    grid = [_gb_for_sessions(n) for n in sizes]
    doc = _capacity(tmp_path, capsys, "--trace", str(traces), "--gpu-tokens",
                    str(2 * CONTEXT_TOKENS + 1000), "--budget-gb", str(grid[-1]),
                    "--write-policy", "write_through",
                    *[a for g in grid for a in ("--host-gb", str(g))], *SLO)
    assert [p["max_sessions"] for p in doc["predicted"]] == [2, 2, 3, 4, 5, 6, 6, 6]
    knee = doc["knee"]
    assert knee["host_gb"] == grid[sizes.index(k)] and knee["max_sessions"] == k
    assert knee["plateau"] is True and knee["resident_sessions"] == 2
    # 6 is every session the workload has: the answer says it is censored
    assert knee["text"] == (f"host {grid[5]:g} GB -> >= 6 sessions (the most the workload "
                            f"offers); beyond {grid[5]:g} GB no gain (0 GB: 2)")
    assert knee["engine_args"] == ["--gpu-tokens", str(2 * CONTEXT_TOKENS + 1000),
                                   "--host-cache-gb", f"{grid[5]:g}", "--write-policy",
                                   "write_through"]
    # every probe is recorded: at 4 contexts of host, 4 passes and 5 fails
    at4 = doc["predicted"][3]
    assert at4["first_failing"] == 5
    steps = {s["concurrency"]: s for s in at4["steps"]}
    assert steps[4]["passed"] and not steps[5]["passed"]
    assert steps[5]["violations"][0].startswith("TTFT p90 ")


def test_quickstart_row_gives_curve_and_recommendation(tmp_path, capsys):
    from kvbench.sweep.quickstart import RECIPE

    # a 5 s TTFT objective: three resident lanes miss it, the host tier keeps them within
    main(["capacity", "--config-files", str(RECIPE), "--trace", "synthetic", "--bounds", "once",
          "--ttft-p90-ms", "5000", "--output", str(tmp_path)])
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "capacity.json").read_text())
    sizes = [p["host_gb"] for p in doc["predicted"]]
    # 0 to the planner's --hicache-size for the row: 133 GB, the 135 GB budget (a DGX H100's
    # 2,063,837 MiB x 0.5 / 8 GPUs) less the planner's default host headroom (1 GB per rank)
    # and the pool's padding page
    assert sizes == [0, 17, 33, 50, 66, 83, 100, 116, 133]
    assert doc["predicted"][-1]["engine_args"][:3] == ["--enable-hierarchical-cache",
                                                      "--hicache-size", "133"]
    assert doc["knee"]["text"] in out and "flags at that size: " in out
    assert "--hicache-size" in out


@pytest.mark.parametrize("args, message", [
    (["--format", "xml"], "--format 'xml' is not one of table, json"),
    (["--ttft-p90-ms", "0"], "invalid value for --ttft-p90-ms (got '0'): out of range"),
    (["--url", "http://127.0.0.1:9"], "--url writes one result.json per step"),
    (["--synthetic-sessions", "0"], "invalid value for --synthetic-sessions (got '0')"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["capacity", "--budget-gb", "10", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_selection_without_a_host_tier_is_refused(tmp_path, capsys):
    from kvbench.sweep.quickstart import RECIPE

    recipe = tmp_path / "resident.yaml"
    text = RECIPE.read_text()
    recipe.write_text("\n".join(line for line in text.splitlines() if "hicache" not in line))
    (tmp_path / "runners.yaml").write_text((RECIPE.parent / "runners.yaml").read_text())
    with pytest.raises(SystemExit) as e:
        main(["capacity", "--config-files", str(recipe)])
    assert e.value.code == 2
    assert "the selection has 0 (none)" in capsys.readouterr().err


def test_max_turns_shortens_every_session_in_the_simulation(tmp_path, capsys):
    traces = write_sessions(tmp_path / "t", sessions=6)
    doc = _capacity(tmp_path, capsys, "--trace", str(traces), "--gpu-tokens",
                    str(7 * CONTEXT_TOKENS), "--budget-gb", "0", "--max-turns", "5", *SLO)
    [point] = doc["predicted"]
    # every probe ran all 6 sessions, each cut to its first 5 of 20 turns
    assert {s["metrics"]["requests"] for s in point["steps"]} == {6 * 5}
    assert doc["workload"]["bounds"]["max_turns"] == 5
