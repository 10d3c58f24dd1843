"""A workload that cannot show an offload effect is said so (issue 26): the working set at a
row's concurrency (its largest sessions' peaks) within the GPU pool warns, with a synthetic
workload sized to a stated multiple of the pool, in capacity, simulate-jobs and
plan --predict."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.workload import load_trace
from kvbench.workload.choice import bundled_traces
from kvbench.workload.working_set import (
    pool_warning,
    session_peak_tokens,
    sized_to_pool,
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


def test_the_sized_workload_is_the_stated_multiple_of_the_pool() -> None:
    for conc, pool in ((4, 43_680), (64, 5_632_370)):
        sized = sized_to_pool(conc, pool, multiple=2.0)
        assert sized.multiple == pytest.approx(2.0, rel=0.01), (conc, pool)
        assert sized.sessions == max(conc, 8)


def test_no_warning_when_the_workload_can_fill_the_pool(bundled) -> None:
    assert pool_warning("row", bundled, 8, 1000) is None
    line = pool_warning("row", bundled, 8, 10_000_000)
    assert line.startswith("warning: row: the workload's working set at conc 8 is at most")
    assert "--synthetic-sessions 8 --synthetic-scale" in line and "2.0x the pool" in line


def test_capacity_and_simulate_jobs_warn_on_the_real_row(capsys) -> None:
    main(["capacity", *ROW, "--bundled-traces", "--points", "1", "--format", "json"])
    err = capsys.readouterr().err
    assert "qwen3.5_tp8_kvdram-hicache_spec-mtp: the workload's working set at conc 8" in err
    assert "within the GPU pool of 5,632,370" in err
    # budget sizing, as capacity sizes: the launcher's --hicache-size 77 (TOTAL / TP / 2)
    # oversubscribes these rows (tests/plan/test_launcher_sizing.py), which would be refused
    main(["simulate-jobs", *ROW, "--trace", str(bundled_traces()[0].parent), "--duration", "5",
          "--format", "json", "--sizing", "budget"])
    err = capsys.readouterr().err
    # the four offload rows (conc 4, 8, 12, 16): three in full, then a count
    assert "qwen3.5_tp8_conc4_kvdram-hicache_spec-mtp: the workload's working set at conc 4" \
        in err
    assert "warning: 1 more row(s) whose GPU pool the workload never fills" in err
    assert "kvnone" not in err  # resident rows have no host tier to miss


def test_plan_predict_warns_too(capsys) -> None:
    main(["plan", "--predict", *ROW, "--format", "json"])
    err = capsys.readouterr().err
    assert "qwen3.5_tp8_conc8_kvdram-hicache_spec-mtp: the workload's working set at conc 8" in err
