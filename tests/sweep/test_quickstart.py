"""`kvbench quickstart`, as the README's first command runs it (source checkout), beside a busy
core: issue 39's acceptance, asserted on every machine CI runs on.

The engine runs on its virtual clock (sim/lockstep.py): every timing is the engine's own, so
what the quickstart shows does not depend on the machine's speed or load. The one thing that
does is how many repeats fit its minute (three, or two on a machine too slow for it: printed),
and every assertion here holds for either. Its wall time is measured beside a hog in
docs/performance.md, never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from kvbench.files import read_json

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
VERDICTS = ("better", "worse", "within noise")


def _tables(stdout: str) -> dict[str, dict[str, list[str]]]:
    """conc=N -> metric -> its cells."""
    out: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        if line.strip().startswith("conc="):
            current = line.strip()
            out[current] = {}
        elif current and line[:1] in ("│", "┃"):  # a row, or the header
            cells = [c.strip() for c in line.split(line[0])[1:-1]]
            out[current][cells[0]] = cells[1:]
    return out


def _hog() -> subprocess.Popen:
    """A busy core: a spinning interpreter, pinned to the first CPU where it can be."""
    pin = None
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        first = min(os.sched_getaffinity(0))

        def pin() -> None:
            os.sched_setaffinity(0, {first})
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)


def test_quickstart_beside_a_busy_core_gives_every_delta_a_verdict(tmp_path):
    hog = _hog()
    try:
        out = subprocess.run([sys.executable, "-m", "kvbench", "quickstart", "--results",
                              str(tmp_path / "qs")], capture_output=True, text=True, env={
                                  **ENV, "COLUMNS": "200"}, cwd=tmp_path, timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert out.returncode == 0, out.stderr[-3000:]
    said = {line.split(":")[0]: line for line in out.stderr.splitlines()
            if line.split(":")[0] in ("placement", "clock", "pace")}
    assert said["clock"].startswith("clock: virtual: the engine's time moves only while"), said
    # where it went depends on what else keeps the cores busy: said, not asserted here
    # (tests/sweep/test_placement.py)
    assert said["placement"].startswith("placement: client and engine "), said
    repeats = int(said["pace"].split()[1])
    assert repeats in (2, 3), said["pace"]
    if repeats == 2:  # a machine too slow for the minute says so, and what it did instead
        # (slower: it fits 2 in a longer run; too slow: 2, the fewest with an interval)
        pace = said["pace"]
        assert "this machine is" in pace and ("running 2 " in pace or "interval (2)" in pace), \
            pace

    # the pace probe's jobs ran in this invocation: counted as run, not as resumed
    assert f"{6 * repeats} jobs: {6 * repeats} ran, 0 resumed" in out.stdout, out.stdout[-2000:]
    tables = _tables(out.stdout)
    assert sorted(tables, key=lambda c: int(c[5:])) == ["conc=3", "conc=6", "conc=12"], tables
    for conc, rows in tables.items():
        assert rows["metric"][:2] == [f"none (n={repeats})", f"dram (n={repeats})"], rows
        assert rows["valid"][:2] == [f"{repeats}/{repeats} valid"] * 2, (conc, rows["valid"])
        for metric, cells in rows.items():
            if metric not in ("metric", "valid", "prompt tokens from"):
                assert "±" in cells[2] and cells[3] in VERDICTS, (conc, metric, cells)
        # offload is exercised at every concurrency shown: the host tier served prompt tokens
        host = rows["cache hit rate (offload tier)"]
        assert host[0].startswith("0 %") and float(host[1].split()[0]) > 5, (conc, host)
        assert host[2].startswith("+") and " pp ±" in host[2], (conc, host)  # one unit
        if conc != "conc=3":  # the host tier's answer where the sessions overflow the GPU
            assert rows["TTFT p50 ms"][3] == "better", (conc, rows["TTFT p50 ms"])
    assert out.stdout.strip().splitlines()[-1] == (
        f"dashboard: {(tmp_path / 'qs' / 'dashboard.html').resolve()}")

    results = sorted((tmp_path / "qs").glob("*/result.json"))
    assert len(results) == 6 * repeats
    for path in results:
        r = read_json(path)
        assert r["status"] == "ok" and r["validity"]["valid"], (path, r["validity"]["reasons"])
        checks = r["validity"]["checks"]
        assert "clock is virtual" in checks["client"]["message"]
        if r["kv_offloading"] == "dram":
            assert checks["offload_tier"]["passed"] is True, (path, checks["offload_tier"])
        assert r["request_metrics"]["time_scale"] == 1.0
        assert read_json(path.parent / "summary.json")["run"]["clock"] == "virtual"
        # Timings are the engine's: a 32B fp8 model on one H100 cannot decode faster than its
        # weights over HBM bandwidth (32.8 GB / 3.35 TB/s = 9.8 ms per token): < 102 tok/s
        inter = r["request_metrics"]["latency"]["interactivity_tok_s"]["p50"]
        assert 5 < inter < 102, (r["exp_name"], inter)

    # a rerun resumes, says so and how to start afresh, and runs nothing again
    again = subprocess.run([sys.executable, "-m", "kvbench", "quickstart", "--results",
                            str(tmp_path / "qs"), "--no-placement"], capture_output=True,
                           text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.startswith(f"resuming: {6 * repeats} result(s) are in "), again.stderr
    assert "to start afresh: rm -r" in again.stderr.splitlines()[0]
    assert f"{6 * repeats} jobs: 0 ran, {6 * repeats} resumed" in again.stdout


def test_run_of_the_quickstart_recipe_runs_what_the_quickstart_runs(tmp_path):
    """The recipe's rows are the embedded engine's: its virtual clock comes with the engine
    (engines/data/sim.yaml), and with no workload bound the run takes the quickstart's
    workload instead of the rows' hour, under the quickstart's run options."""
    from kvbench.sweep.quickstart import quickstart_options

    out = subprocess.run([sys.executable, "-m", "kvbench", "run",
                          str(REPO / "examples" / "quickstart.yaml"), "--results",
                          str(tmp_path / "r"), "--max-conc", "3", "--no-dashboard"],
                         capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "85 requests per job" in out.stderr and "2 jobs: 2 ran" in out.stdout
    for path in (tmp_path / "r").glob("*/result.json"):
        r = read_json(path)
        assert r["options_id"] == quickstart_options().options_id()
        assert r["validity"]["valid"], r["validity"]["reasons"]
        assert "--clock" in (argv := read_json(path.parent / "command.json")["argv"])
        assert argv[argv.index("--clock") + 1] == "virtual"
