"""Where the quickstart's client and engine run (sweep/placement.py): the idle cores beside a
busy one, at a higher priority where allowed, said in one line."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO

from kvbench.sweep import placement


def test_busy_shares_come_from_proc_stat(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    frames = iter([
        "cpu  0 0 0 0\ncpu0 100 0 0 900 0\ncpu1 100 0 0 900 0\n",
        "cpu  0 0 0 0\ncpu0 190 0 0 910 0\ncpu1 105 0 0 995 0\n",
    ])
    monkeypatch.setattr(placement, "PROC_STAT", stat)
    monkeypatch.setattr(placement.time, "sleep", lambda s: stat.write_text(next(frames)))
    stat.write_text(next(frames))
    busy = placement.cpu_busy(0.01)
    assert busy == {0: pytest.approx(0.9), 1: pytest.approx(0.05)}
    monkeypatch.setattr(placement, "PROC_STAT", tmp_path / "absent")
    assert placement.cpu_busy(0.01) == {}


def test_the_line_says_where_and_at_what_priority():
    p = placement.Placement((1,), {0: 0.99, 1: 0.02}, -10)
    assert p.line() == ("placement: client and engine kept to CPU 1 (busy: CPU 0 99%, CPU 1 2%); "
                        "priority nice -10")
    q = placement.Placement(None, {}, None)
    assert q.line() == ("placement: client and engine on any CPU (busy: unknown); priority "
                        "unchanged (a higher one needs root or CAP_SYS_NICE)")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and CPU affinity")
@pytest.mark.alone  # the idle core it looks for must not be busy with another test
def test_a_busy_core_is_left_to_its_program():
    first = min(os.sched_getaffinity(0))
    before = placement.cpu_busy()
    if not any(share < placement.BUSY_SHARE for c, share in before.items() if c != first):
        pytest.skip(f"no core beside CPU {first} is idle to move to: {before}")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, {first}))
    try:
        time.sleep(0.5)
        out = subprocess.run(
            [sys.executable, "-c", "import os; from kvbench.sweep.placement import place; "
             "p = place(); print(p.line()); print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True, text=True, timeout=60,
            env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    finally:
        hog.kill()
        hog.wait()
    assert out.returncode == 0, out.stderr
    line, cpus = out.stdout.splitlines()
    assert first not in ast.literal_eval(cpus), out.stdout
    assert line.startswith("placement: client and engine kept to CPU "), line
    busy = line.split(f"CPU {first} ", 1)[1].split("%", 1)[0]
    assert int(busy) > 50, line
