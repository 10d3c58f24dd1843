"""`kvbench quickstart`, as the README's first command runs it (source checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import REPO

from kvbench.files import read_json

pytestmark = pytest.mark.slow


def _tables(stdout: str) -> dict[str, list[str]]:
    """conc=N -> the rows of its comparison table."""
    out: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.strip().startswith("conc="):
            current = line.strip()
            out[current] = []
        elif current and line.startswith("│"):
            out[current].append(line)
    return out


def test_quickstart_runs_repeats_and_prints_deltas_with_their_noise(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "kvbench", "quickstart", "--results",
                          str(tmp_path / "qs")], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=170)
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    assert "18 jobs: 18 ran" in out.stdout
    assert "none (n=3)" in out.stdout and "dram (n=3)" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last == f"dashboard: {(tmp_path / 'qs' / 'dashboard.html').resolve()}"
    results = sorted((tmp_path / "qs").glob("*/result.json"))
    assert len(results) == 18
    by_name = {p.parent.name: read_json(p) for p in results}
    assert all(r["status"] == "ok" for r in by_name.values())
    # issue 15: < 60 s on two idle cores; a shared CI box gets some slack
    assert elapsed < 100, f"quickstart took {elapsed:.0f} s"
    tables = _tables(out.stdout)
    assert sorted(tables) == ["conc=2", "conc=4", "conc=8"]
    for conc, rows in tables.items():
        assert rows[0].split("│")[1].strip() == "valid", conc
        cells = {r.split("│")[1].strip(): [c.strip() for c in r.split("│")[2:-1]]
                 for r in rows}
        for metric in ("TTFT p50 ms", "output tok/s/GPU"):
            delta, verdict = cells[metric][2], cells[metric][3]
            assert "±" in delta and verdict in ("better", "worse", "within noise",
                                                 "offload not exercised", "not valid"), (
                conc, delta)
            # an arm with a run that is not valid gives no better/worse (issue 27, item 10)
            if any("/3 valid" in c and not c.startswith("3/3") for c in cells["valid"]):
                assert verdict in ("not valid", "offload not exercised"), (conc, cells)
        host = cells["cache hit rate (offload tier)"]
        if host[1].startswith("0 "):  # the host tier was never hit: no significant delta
            assert all(c[3] in ("within noise", "offload not exercised", "not valid")
                       for c in cells.values() if len(c) > 3 and c[3]), (conc, cells)
            assert "offload-tier-never-hit" in cells["valid"][1]
    for r in by_name.values():
        assert set(r["validity"]["checks"]) == {"ideal_cache", "warm_cache", "offload_tier",
                                                "client", "failed_ratio", "prompt_size",
                                                "usage", "label"}
        assert r["validity"]["checks"]["warm_cache"]["passed"] is True
        assert r["validity"]["checks"]["prompt_size"]["passed"] is True
        ideal = r["validity"]["checks"]["ideal_cache"]
        assert ideal["passed"] is True and 0.5 < ideal["ideal_hit_rate"] < 1
        # Timings are in the embedded engine's clock, not the 50x compressed wall clock: an
        # 8B bf16 model on one H100 cannot decode faster than weights / HBM bandwidth
        # (16 GB / 3.35 TB/s = 4.8 ms per token), so interactivity stays under ~210 tok/s.
        inter = r["request_metrics"]["latency"]["interactivity_tok_s"]["p50"]
        assert 5 < inter < 210, (r["exp_name"], inter)


def test_run_of_the_quickstart_recipe_takes_the_quickstarts_minute(tmp_path):
    """The recipe's rows are the embedded engine's: its clock scale comes with the engine
    (engines/data/sim.yaml), replay learns it from the server, and with no workload bound
    the run takes the quickstart's workload instead of the rows' hour."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "kvbench", "run",
                          str(REPO / "examples" / "quickstart.yaml"), "--results",
                          str(tmp_path / "r"), "--no-dashboard"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=170)
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    assert "85 requests per job" in out.stderr and "6 jobs: 6 ran" in out.stdout
    assert elapsed < 60, f"kvbench run examples/quickstart.yaml took {elapsed:.0f} s"
    for path in (tmp_path / "r").glob("*/result.json"):
        r = read_json(path)
        assert r["request_metrics"]["time_scale"] == 50.0
        assert read_json(path.parent / "summary.json")["run"]["time_scale_source"] == "server"
        assert "--time-scale" in read_json(path.parent / "command.json")["argv"]


def _hog() -> subprocess.Popen:
    """A busy core: a spinning interpreter, pinned to the first CPU where it can be."""
    pin = None
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        first = min(os.sched_getaffinity(0))

        def pin() -> None:
            os.sched_setaffinity(0, {first})
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)


@pytest.mark.alone  # the busy core is its own hog's: no other test may load the machine
def test_quickstart_with_a_busy_core_picks_a_pace_the_client_sustains(tmp_path):
    """Issue 27 item 10: two cores, one of them busy: at least 5 of the 6 cells valid, in
    under a minute, with the time scale chosen and said. A cell is valid when each of its runs
    passes every check but `offload_tier`: the dram arm at conc 2 and 4 never needs the host
    tier (its KV fits on the GPU), the comparison's answer, not a defect of the run."""
    if hasattr(os, "getloadavg") and os.getloadavg()[0] > (os.cpu_count() or 2):
        # the scenario is two cores with one busy; on a machine whose cores are all busy
        # already the quickstart's client is late whatever its pace (measured:
        # docs/performance.md, "The quickstart on a busy machine")
        pytest.skip(f"load average {os.getloadavg()[0]:.1f}: busier than one busy core")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    hog = _hog()
    try:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "kvbench", "quickstart", "--results",
                              str(tmp_path / "qs")], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=170)
        elapsed = time.monotonic() - t0
    finally:
        hog.kill()
        hog.wait()
    assert out.returncode == 0, out.stderr[-3000:]
    placed = [line for line in out.stderr.splitlines() if line.startswith("placement: ")]
    if len(os.sched_getaffinity(0)) >= 2:  # the hog's core is left to it
        assert len(placed) == 1 and "kept to CPU" in placed[0], out.stderr[-2000:]
    chosen = [line for line in out.stderr.splitlines() if line.startswith("time scale ")]
    assert len(chosen) == 1 and "x: " in chosen[0], out.stderr[-2000:]
    scale = float(chosen[0].split()[2].rstrip("x:"))
    cells: dict[tuple, list[bool]] = {}
    failing: set[str] = set()
    for path in (tmp_path / "qs").glob("*/result.json"):
        r = read_json(path)
        assert r["request_metrics"]["time_scale"] == scale
        checks = r["validity"]["checks"]
        failed = {name for name, c in checks.items()
                  if name != "offload_tier" and c["passed"] is False}
        failing |= failed
        cells.setdefault((r["conc"], r["kv_offloading"]), []).append(not failed)
    assert len(cells) == 6 and all(len(v) == 3 for v in cells.values())
    valid = sorted(k for k, v in cells.items() if all(v))
    if "the client would need" in chosen[0]:
        # The pace's own probe found the client cannot keep the pace the minute needs: a
        # machine slower than the scenario's (this suite's 2-core sandbox ran at half its
        # usual single-core speed on 2026-12-02: simulate_speed 13.6k against 28.4k req/s,
        # and this case gave 0 of 6 cells). The quickstart must say so, as it did, and the
        # runs it could not keep must be flagged by the client check and by no other.
        assert "may be flagged client-saturated" in chosen[0], chosen[0]
        assert failing <= {"client"}, (failing, cells)
        pytest.skip(f"this machine is too slow for the busy-core minute ({chosen[0][:120]}); "
                    f"{len(valid)} of 6 cells valid, every other flagged by the client check")
    assert len(valid) >= 5, (chosen[0], cells)
    assert elapsed < 60, f"quickstart took {elapsed:.0f} s ({chosen[0]})"
