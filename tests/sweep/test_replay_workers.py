"""`kvbench run --replay-workers N`: each job's replay sharded over N processes (issue 27
item 11), at most the job's concurrency; how the client runs is not part of the fingerprint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from fixtures.servers import replay_workers_of

from kvbench.files import read_json
from kvbench.sweep.options import RunOptions

pytestmark = pytest.mark.slow


def test_run_shards_each_jobs_replay(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "kvbench", "run",
                          str(REPO / "examples" / "quickstart.yaml"), "--replay-workers", "4",
                          "--max-requests", "16", "--max-conc", "3", "--framework", "sim",
                          "--results", str(tmp_path / "r"), "--no-dashboard"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    summaries = [read_json(p) for p in (tmp_path / "r").glob("*/summary.json")]
    assert len(summaries) == 2
    for s in summaries:
        assert s["run"]["workers"] == 3 and s["run"]["concurrency"] == 3  # capped at conc
        assert s["requests"]["total"] == 16 and len(s["client"]["workers"]) == 3


def test_replay_workers_leave_the_fingerprint_alone():
    assert (RunOptions(replay_workers=4).measurement_identity()
            == RunOptions().measurement_identity())


_workers_of = replay_workers_of


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_stopped_run_leaves_no_replay_worker(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    results = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "kvbench", "run",
                             str(REPO / "examples" / "quickstart.yaml"), "--replay-workers", "2",
                             "--max-requests", "400", "--min-conc", "12", "--framework", "sim",
                             "--results", str(results), "--no-dashboard"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 120
        while len(_workers_of(results)) < 2:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < end, "no replay workers"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
        end = time.monotonic() + 10
        while _workers_of(results) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _workers_of(results), "replay workers outlived kvbench run"
        if sig == signal.SIGINT:
            assert proc.returncode == 130, err.decode()[-2000:]
            assert b"Traceback" not in err, err.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
