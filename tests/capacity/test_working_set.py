"""A workload that cannot fill a row says so in one line, with the sessions it would take
(issue 26, issue 36): its working set at the row's concurrency (its largest sessions' peaks)
within the GPU pool, or fewer sessions than lanes; in capacity, simulate-jobs and
plan --predict."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.workload import load_trace
from kvbench.workload.choice import bundled_traces
from kvbench.workload.working_set import (
    first_and_count,
    lanes_warning,
    pool_warning,
    session_peak_tokens,
    sessions_to_fill,
    working_set_tokens,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"
ROW = ["--config-files", str(DATA / "nvidia-master.yaml"), "--runner-config",
       str(DATA / "runners.yaml"), "--config-keys", "qwen3.5-fp8-h200-sglang-agentic-mtp"]


@pytest.fixture(scope="module")
def bundled():
    return load_trace(bundled_traces())


def test_working_set_is_the_largest_sessions_peaks(bundled) -> None:
    peaks = sorted((session_peak_tokens(s) for s in bundled), reverse=True)
    assert working_set_tokens(bundled, 3) == sum(peaks[:3])
    assert working_set_tokens(bundled, 1000) == sum(peaks)
    assert peaks[0] == max(t.input_tokens + t.output_tokens for s in bundled for t in s.turns)
    # the sessions at once that fill a pool: the fewest largest whose peaks pass it
    assert sessions_to_fill(bundled, peaks[0] - 1) == 1
    assert sessions_to_fill(bundled, peaks[0] + peaks[1] - 1) == 2
    assert sessions_to_fill(bundled, sum(peaks)) is None


def test_the_pool_line_names_the_sessions_it_would_take(bundled) -> None:
    peaks = sorted((session_peak_tokens(s) for s in bundled), reverse=True)
    assert pool_warning("row", bundled, 8, 1000) is None
    pool = peaks[0] + peaks[1] + 10
    line = pool_warning("row", bundled, 1, pool)
    assert line.startswith(f"warning: row: at conc 1 the workload's working set is at most "
                           f"{peaks[0]:,} KV tokens")
    assert line.endswith("filling it takes 3 of these sessions at once (conc >= 3)")
    line = pool_warning("row", bundled, 8, 10_000_000)
    assert f"all {len(bundled)} of its sessions at once do not" in line
    assert "--trace agentx" in line


def test_the_lanes_line_names_the_sessions_the_lanes_need() -> None:
    assert lanes_warning("row", 9, 8, recycle=False) is None
    line = lanes_warning("row", 9, 512, recycle=False)
    assert line.startswith("warning: row: 512 session lanes on 9 sessions: only 9 lanes ever "
                           "have a session, so this measures 9 concurrent sessions, not 512")
    assert "503 lanes never start" in line
    line = lanes_warning("row", 9, 512, recycle=True)
    assert "503 lanes replay sessions again" in line and "512 sessions would fill them" in line
    assert first_and_count(["a", "b", "c", "d", "e"], "x", shown=3) == [
        "a", "b", "c", "warning: 2 more row(s) x"]


def test_capacity_and_simulate_jobs_warn_on_the_real_row(capsys) -> None:
    main(["capacity", *ROW, "--trace", "bundled", "--bounds", "once", "--points", "1",
          "--format", "json"])
    err = capsys.readouterr().err
    assert "qwen3.5_tp8_kvdram-hicache_spec-mtp: at conc 8 the workload's working set" in err
    assert "within the GPU pool of 6,348,190" in err
    # budget sizing, as capacity sizes: the launcher's --hicache-size 77 (TOTAL / TP / 2)
    # oversubscribes these rows (tests/plan/test_launcher_sizing.py), which would be refused
    main(["simulate-jobs", *ROW, "--trace", "bundled", "--bounds", "once", "--format", "json",
          "--sizing", "budget"])
    err = capsys.readouterr().err
    # the four offload rows (conc 4, 8, 12, 16): three in full, then a count
    assert "qwen3.5_tp8_conc4_kvdram-hicache_spec-mtp: at conc 4 the workload's working set" \
        in err
    assert "warning: 1 more row(s) whose GPU pool the workload never fills" in err
    # resident rows have no host tier to miss
    assert not [line for line in err.splitlines() if "kvnone" in line and "working set" in line]
    # and the lanes: conc 12 and 16 have more lanes than the 8 sessions
    assert ("qwen3.5_tp8_conc12_kvnone_spec-mtp: 12 session lanes on 8 sessions: only 8 lanes "
            "ever have a session") in err


def test_plan_predict_warns_too(capsys) -> None:
    main(["plan", "--predict", *ROW, "--trace", "bundled", "--bounds", "once", "--format",
          "json", "--sizing", "budget"])
    err = capsys.readouterr().err
    assert "qwen3.5_tp8_conc8_kvdram-hicache_spec-mtp: at conc 8 the workload's working set" \
        in err
