"""`kvbench run --replay-workers N`: each job's replay sharded over N processes (issue 27
item 11), at most the job's concurrency; how the client runs is not part of the fingerprint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from kvbench.files import read_json
from kvbench.sweep.options import RunOptions

pytestmark = pytest.mark.slow


def test_run_shards_each_jobs_replay(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "kvbench", "run",
                          str(REPO / "examples" / "quickstart.yaml"), "--replay-workers", "4",
                          "--max-requests", "16", "--max-conc", "2", "--framework", "sim",
                          "--results", str(tmp_path / "r"), "--no-dashboard"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    summaries = [read_json(p) for p in (tmp_path / "r").glob("*/summary.json")]
    assert len(summaries) == 2
    for s in summaries:
        assert s["run"]["workers"] == 2 and s["run"]["concurrency"] == 2  # capped at conc
        assert s["requests"]["total"] == 16 and len(s["client"]["workers"]) == 2


def test_replay_workers_leave_the_fingerprint_alone():
    assert (RunOptions(replay_workers=4).measurement_identity()
            == RunOptions().measurement_identity())
