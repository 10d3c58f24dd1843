"""Resume keeps a result only if it replayed the sessions the job would send now.

A job's fingerprint holds its traces' bytes, not the sessions kvbench reads from them: on the
H200, repeats "resumed" into runs of an older kvbench (which slept each turn's recorded
think_time, where kvbench now sleeps the stream's end-to-start gap) replayed 14 requests in
50 s where the runs they were to repeat sent 36, under the same fingerprint. A result
records the digest of the sessions it sent (workload/identity.py); one that recorded other
sessions, or none, is run again, and the banner says why."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

RECIPE = REPO / "examples" / "quickstart.yaml"
ENV = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
ARGS = ("--max-conc", "3", "--max-requests", "3", "--think-time-scale", "0", "--no-dashboard",
        "--format", "json")


def run(results) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "kvbench", "run", str(RECIPE), "--results",
                          str(results), *ARGS], capture_output=True, text=True, env=ENV,
                         cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def statuses(out: subprocess.CompletedProcess) -> dict[str, str]:
    return {o["job"]: o["status"] for o in json.loads(out.stdout)}


@pytest.mark.slow
def test_a_result_of_other_sessions_is_run_again(tmp_path):
    from kvbench.workload import load_trace
    from kvbench.workload.choice import bundled_traces
    from kvbench.workload.identity import fingerprint

    first = run(tmp_path)
    names = sorted(statuses(first))
    assert len(names) >= 2 and set(statuses(first).values()) == {"ok"}
    digest = fingerprint(load_trace(bundled_traces()))
    for name in names:  # what each run recorded is what the traces load as
        doc = json.loads((tmp_path / name / "result.json").read_text())
        assert doc["workload"]["corpus"]["fingerprint"] == digest

    again = run(tmp_path)
    assert set(statuses(again).values()) == {"skipped"}
    assert "other sessions" not in again.stderr

    # one result as another kvbench would have left it (other sessions from the same
    # files), one written before results recorded their sessions
    other, unrecorded = names[0], names[1]
    path = tmp_path / other / "result.json"
    doc = json.loads(path.read_text())
    doc["workload"]["corpus"]["fingerprint"] = "0" * 64
    path.write_text(json.dumps(doc))
    path = tmp_path / unrecorded / "result.json"
    doc = json.loads(path.read_text())
    del doc["workload"]
    path.write_text(json.dumps(doc))

    third = run(tmp_path)
    got = statuses(third)
    assert got[other] == got[unrecorded] == "ok"
    assert {got[n] for n in names[2:]} <= {"skipped"}
    assert (f"2 result(s) in {tmp_path} are of these jobs' options but of other sessions"
            in third.stderr), third.stderr
    for name in (other, unrecorded):
        doc = json.loads((tmp_path / name / "result.json").read_text())
        assert doc["workload"]["corpus"]["fingerprint"] == digest
