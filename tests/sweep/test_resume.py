"""End to end on the embedded engine: a sweep killed halfway (SIGINT, then SIGKILL) and
resumed loses no result and duplicates none."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from conftest import REPO

from kvbench.files import read_json, read_jsonl

pytestmark = pytest.mark.slow

RECIPE = REPO / "examples" / "quickstart.yaml"
ARGS = ["run", str(RECIPE), "--max-conc", "6", "--time-scale", "50", "--max-requests", "8",
        "--think-time-scale", "0", "--ready-timeout", "300", "--replay-timeout", "60",
        "--no-dashboard", "--format", "json"]
JOBS = 4  # two arms x concurrencies 3 and 6


def start(results: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen([sys.executable, "-m", "kvbench", *ARGS, "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (servers run in their own sessions, so a SIGKILL of
    kvbench would orphan them; the test ends them by pid)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def finished(results: Path) -> list[str]:
    return sorted(p.parent.name for p in results.glob("*/result.json"))


def wait_mid_job(proc: subprocess.Popen, results: Path, done: int, timeout_s: float = 90):
    """Until `done` results exist and the next job is replaying (its records.jsonl exists)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        names = finished(results)
        running = [p.parent.name for p in results.glob("*/records.jsonl")
                   if p.parent.name not in names and p.stat().st_size > 0]
        if len(names) >= done and running:
            return
        time.sleep(0.05)
    raise AssertionError(f"no job in flight after {done} results: {finished(results)}")


def snapshot(results: Path) -> dict[str, bytes]:
    return {n: (results / n / "result.json").read_bytes() for n in finished(results)}


def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path: Path):
    results = tmp_path / "results"

    # 1. Ctrl-C in the middle of the second job: servers are torn down, exit code 130.
    proc = start(results)
    wait_mid_job(proc, results, done=1)
    kids = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert not [k for k in kids if Path(f"/proc/{k}").exists()
                and "zombie" not in Path(f"/proc/{k}/status").read_text()], "server leaked"
    after_int = snapshot(results)
    assert 1 <= len(after_int) <= 2  # 2 only if the signal landed as job 2 wrote its result

    # 2. SIGKILL in the middle of the third job (nothing can clean up).
    proc = start(results)
    wait_mid_job(proc, results, done=len(after_int) + 1)
    kids = descendants(proc.pid)
    proc.kill()
    proc.communicate(timeout=30)
    for k in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(k, signal.SIGKILL)
    after_kill = snapshot(results)
    assert len(after_int) < len(after_kill) < JOBS
    assert after_kill.items() >= after_int.items()  # earlier results were not redone

    # 3. Resume to the end.
    proc = start(results)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()
    outcomes = orjson.loads(out)
    statuses = sorted(o["status"] for o in outcomes)
    assert statuses == ["ok"] * (JOBS - len(after_kill)) + ["skipped"] * len(after_kill)
    final = snapshot(results)
    assert len(final) == JOBS
    for name, raw in after_kill.items():
        assert final[name] == raw  # finished results are never rewritten
    manifest = read_json(results / ".kvbench" / "jobs.json")
    assert sorted(m["dir"] for m in manifest) == sorted(final)
    assert sorted(p.name for p in results.iterdir() if not p.name.startswith(".")) == \
        sorted(final)
    for entry in manifest:
        job_dir = results / entry["dir"]
        result = read_json(job_dir / "result.json")
        assert result["fingerprint"] == entry["fingerprint"]
        assert result["status"] == "ok", result.get("failure")
        ids = [r["request_id"] for r in read_jsonl(job_dir / "records.jsonl")]
        assert len(ids) == len(set(ids)) > 0
