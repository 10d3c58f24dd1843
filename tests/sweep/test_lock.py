"""One sweep per results directory: a second `kvbench run` on a directory a run is using is
refused at once naming the other process; a SIGKILLed run leaves no stuck lock; the lock and
the executor state are never written through a symlink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbench.errors import SweepError
from kvbench.sweep.lock import results_lock

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "quickstart.yaml"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "http_proxy": "", "https_proxy": ""}


def _start_run(results: Path) -> subprocess.Popen:
    # enough requests that the sweep is still running when the second one starts
    return subprocess.Popen(
        [sys.executable, "-m", "kvbench", "run", str(RECIPE), "--results", str(results),
         "--max-requests", "400", "--max-conc", "3", "--dashboard", "--format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)


def _wait_locked(results: Path, proc: subprocess.Popen) -> str:
    lock = results / ".kvbench" / "lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = lock.read_text() if lock.exists() else ""
        if f"pid {proc.pid}" in text:
            return text
        assert proc.poll() is None, "the first run ended before taking the lock"
        time.sleep(0.1)
    raise AssertionError("the first run never took the lock")


def test_a_second_run_is_refused_naming_the_first_and_a_killed_run_leaves_no_lock(tmp_path):
    results = tmp_path / "results"
    first = _start_run(results)
    try:
        _wait_locked(results, first)
        second = subprocess.run(
            [sys.executable, "-m", "kvbench", "run", str(RECIPE), "--results", str(results),
             "--max-requests", "2", "--max-conc", "3"],
            capture_output=True, text=True, env=ENV, timeout=120)
        assert second.returncode == 3, second.stderr
        assert f"{results} is in use by another kvbench run (pid {first.pid}, started" in (
            second.stderr)
        assert "Traceback" not in second.stderr
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        with results_lock(results):  # the kernel dropped the killed run's lock
            pass
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)


def test_the_lock_is_exclusive_within_one_process_too(tmp_path):
    with (results_lock(tmp_path), pytest.raises(SweepError, match=f"pid {os.getpid()}"),
          results_lock(tmp_path)):
        pass


@pytest.mark.parametrize("planted", [".kvbench", ".kvbench/lock"])
def test_internal_paths_are_never_written_through_a_symlink(planted, tmp_path):
    results = tmp_path / "results"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == ".kvbench/lock":
        (results / ".kvbench").mkdir(parents=True)
        (results / planted).symlink_to(elsewhere / "lock")
    else:
        results.mkdir()
        (results / planted).symlink_to(elsewhere)
    with (pytest.raises(SweepError, match=r"symlink|cannot open the results directory's lock"),
          results_lock(results)):
        pass
    assert list(elsewhere.iterdir()) == []
