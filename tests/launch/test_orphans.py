"""No orphans: whatever happens to kvbench (SIGKILL, SIGHUP, a second SIGTERM or SIGINT while
it tears down), no process of a server tree outlives it. Real process trees: a server that
forks a worker, a worker escaped to its own session and an orphaned grandchild, optionally all
ignoring SIGTERM (so teardown takes its grace period and a second signal lands inside it)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fixtures.inferencex import launch_sim_argv
from fixtures.servers import FORKING_SERVER, PY, alive, free_port

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}

DRIVER = """
import sys, time
sys.path.insert(0, {src!r})
from kvbench.launch import ServerProcess
argv = [sys.executable, {server!r}, "{port}", {pids!r}, "{stubborn}"]
try:
    with ServerProcess(argv, env={{}}, log_path={log!r}, ready_url="http://127.0.0.1:{port}/",
                       ready_timeout_s=300, grace_s={grace}, poll_interval_s=0.1) as s:
        s.wait_ready()
        print("READY", s.pid, flush=True)
        time.sleep(600)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(130)
"""


def start_driver(tmp_path: Path, *, stubborn: bool = False, grace_s: float = 2.0):
    server = tmp_path / "server.py"
    server.write_text(FORKING_SERVER)
    pid_file = tmp_path / "pids"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(src=str(SRC), server=str(server), port=free_port(),
                                    pids=str(pid_file), stubborn=int(stubborn),
                                    log=str(tmp_path / "server.log"), grace=grace_s))
    proc = subprocess.Popen([PY, str(driver)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    pids = [int(line.split()[1]), *map(int, pid_file.read_text().split())]
    assert all(alive(p) for p in pids) and len(pids) == 4
    return proc, pids


def survivors_after(pids: list[int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_all(pids: list[int]) -> None:
    for p in pids:
        if alive(p):
            os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("stubborn", [False, True], ids=["polite", "ignores-term"])
def test_sigkill_of_kvbench_leaves_no_survivors(tmp_path, stubborn):
    proc, pids = start_driver(tmp_path, stubborn=stubborn, grace_s=1.0)
    try:
        proc.kill()  # no handler runs: only the watchdog can clean up
        proc.wait(10)
        # the watchdog: TERM, 1 s grace, KILL
        assert survivors_after(pids, 15) == []
    finally:
        kill_all(pids)


def test_sighup_tears_down_like_sigterm(tmp_path):
    proc, pids = start_driver(tmp_path)
    try:
        proc.send_signal(signal.SIGHUP)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130 and "INTERRUPTED" in out
        assert [p for p in pids if alive(p)] == []  # at exit, not later by the watchdog
    finally:
        kill_all(pids)


@pytest.mark.parametrize("first,second", [(signal.SIGTERM, signal.SIGTERM),
                                          (signal.SIGINT, signal.SIGINT),
                                          (signal.SIGTERM, signal.SIGINT)],
                         ids=["term-term", "int-int", "term-int"])
def test_a_second_signal_does_not_cut_teardown_short(tmp_path, first, second):
    # Every process ignores TERM: teardown waits its 3 s grace, then KILLs.
    proc, pids = start_driver(tmp_path, stubborn=True, grace_s=3.0)
    try:
        t0 = time.monotonic()
        proc.send_signal(first)
        time.sleep(1.0)  # inside the grace period
        assert proc.poll() is None
        proc.send_signal(second)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130 and "INTERRUPTED" in out
        assert time.monotonic() - t0 >= 2.9  # the grace period ran to its end
        assert [p for p in pids if alive(p)] == []
    finally:
        kill_all(pids)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except OSError:
                pass
    out, frontier = [], [pid]
    while frontier:
        for c in children.get(frontier.pop(), []):
            out.append(c)
            frontier.append(c)
    return out


def _serve_sim_pids(root: int) -> list[int]:
    found = []
    for pid in _descendants(root):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve-sim" in cmd:
            found.append(pid)
    return found


@pytest.mark.slow
def test_sigkill_of_kvbench_launch_takes_serve_sim_down(tmp_path):
    port = free_port()
    argv = launch_sim_argv(tmp_path, port, ready_timeout_s=300, grace_s=2)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=ENV)
    sims: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or line.startswith("ready after"):
                break
        sims = _serve_sim_pids(proc.pid)
        assert sims, "kvbench launch should be running serve-sim"
        proc.kill()
        proc.wait(10)
        assert survivors_after(sims, 15) == []
    finally:
        kill_all(sims)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_sigkill_of_kvbench_run_takes_serve_sim_down(tmp_path):
    results = tmp_path / "results"
    recipe = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    argv = [PY, "-m", "kvbench", "run", str(recipe), "--results", str(results)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=ENV)
    sims: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not sims and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            sims = _serve_sim_pids(proc.pid)
        assert sims, f"kvbench run should be running serve-sim (rc {proc.poll()})"
        time.sleep(1.0)
        proc.kill()
        proc.wait(10)
        assert survivors_after(sims, 40) == []
    finally:
        kill_all(sims)
        if proc.poll() is None:
            proc.kill()


def test_watchdog_exits_after_a_clean_teardown(tmp_path):
    """Normal exit: kvbench tears down, closes the pipe, and the watchdog leaves too."""
    proc, pids = start_driver(tmp_path)
    try:
        watchdogs = [p for p in _descendants(proc.pid)
                     if b"kvbench.launch.watchdog" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(watchdogs) == 1  # its own session, but still kvbench's child
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert survivors_after(watchdogs + pids, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(pids)
