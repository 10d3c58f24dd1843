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


AFFINITY = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs and CPU affinity")
# place() in a process of its own (it moves the process that calls it), printing its line
# and the CPUs it may then use; with a file path as argv[1], /proc/stat is read from that
# file, whose second frame shows the first allowed CPU fully busy and the others idle
PLACE = """
import os, sys
from kvbench.sweep import placement
if len(sys.argv) > 1:
    stat, first = placement.Path(sys.argv[1]), min(os.sched_getaffinity(0))
    def frame(t):
        return "cpu  0 0 0 0\\n" + "".join(
            f"cpu{c} {t if c == first else 0} 0 0 {0 if c == first else t} 0\\n"
            for c in sorted(os.sched_getaffinity(0)))
    stat.write_text(frame(100))
    placement.PROC_STAT = stat
    placement.time.sleep = lambda s: stat.write_text(frame(200))
p = placement.place()
print(p.line())
print(sorted(os.sched_getaffinity(0)))
"""


def _place(*argv: str, hog: bool = False) -> tuple[str, list[int], int]:
    first = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                               preexec_fn=lambda: os.sched_setaffinity(0, {first})
                               ) if hog else None
    try:
        if spinner:
            time.sleep(0.5)
        out = subprocess.run([sys.executable, "-c", PLACE, *argv], capture_output=True,
                             text=True, timeout=60,
                             env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    assert out.returncode == 0, out.stderr
    line, cpus = out.stdout.splitlines()
    return line, ast.literal_eval(cpus), first


@AFFINITY
def test_a_busy_core_is_left_to_its_program(tmp_path):
    # the busy core as /proc/stat says it (a file here): the decision does not depend on what
    # else the machine runs; the affinity set is the real one
    line, cpus, first = _place(str(tmp_path / "stat"))
    assert first not in cpus and cpus == sorted(set(os.sched_getaffinity(0)) - {first}), line
    assert line.startswith(f"placement: client and engine kept to CPU {cpus[0]}"), line
    assert f"CPU {first} 100%" in line, line


@AFFINITY
def test_the_line_says_what_was_done_beside_a_real_busy_core():
    """A real spinning core and the real /proc/stat: which cores count as idle then depends on
    everything else the machine runs (asserted: only that the line says what was done)."""
    line, cpus, _ = _place(hog=True)
    if "kept to CPU" in line:
        kept = line.split("kept to CPU", 1)[1].split("(", 1)[0].replace("CPU", "")
        assert cpus == sorted(int(c) for c in kept.replace(",", " ").split()), line
    else:
        assert line.startswith("placement: client and engine on any CPU"), line
        assert cpus == sorted(os.sched_getaffinity(0)), line
