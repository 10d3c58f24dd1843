"""Capacity on the real InferenceX rows (tests/data/inferencex, InferenceX 843c6254f): the
default grid stays inside what the planner accepts on every key, an answer at the workload's
ceiling says it is censored, a key with several offload rows answers per row, and with the
default workload and SLO every single-node agentic key with an offload row exits 0 (issue 26).
The command with every default on every key (9 host sizes, a search at each: ~930 simulated
probes, a quarter of the suite's CPU) is benchmarks/capacity_real_rows.py; here every key's
default grid is sized by the planner and every row simulates the default workload at the
workload's ceiling on the grid's ends (docs/performance.md, "The test suite's time")."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

import pytest

from kvbench.capacity import Slo
from kvbench.capacity.curve import HostPoint, find_knee, host_grid
from kvbench.capacity.target import _accepted, offload_rows, target_from_job
from kvbench.cli import capacity as capacity_command
from kvbench.cli import main
from kvbench.matrix import select_jobs
from kvbench.matrix.generate import selection_runners
from kvbench.matrix.selection import Selection

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"
RUNNERS = DATA / "runners.yaml"


def _selection(vendor: str, key: str | None = None) -> Selection:
    return Selection(config_files=(DATA / f"{vendor}-master.yaml",), runner_config=RUNNERS,
                     config_keys=(key,) if key else ())


def _offload_keys() -> list[tuple[str, str]]:
    out = []
    for vendor in ("nvidia", "amd"):
        rows = offload_rows(select_jobs(_selection(vendor)))
        out += sorted({(vendor, j.config_key) for j in rows if "agentic" in str(j.scenario)})
    return out


KEYS = _offload_keys()


def test_the_default_grid_is_inside_what_the_planner_accepts() -> None:
    # the row's own size is 148 GB per rank (its grid once asked for 92 and was refused); as
    # an explicit --hicache-size the planner allows 74 (the pools outside the configured
    # size count on top of it)
    sel = _selection("nvidia", "qwen3.5-fp8-h200-sglang-agentic-mtp")
    (job,) = offload_rows(select_jobs(sel))
    runners = selection_runners(sel)
    target = target_from_job(job, runners)
    assert target.describe["host-gb-per-rank-row"] == pytest.approx(148, abs=1)
    assert target.budget_gb == 74.0
    assert _accepted(job, runners, 74.0) and not _accepted(job, runners, 75.0)


def test_every_keys_default_grid_is_sized_by_the_planner() -> None:
    for vendor, key in KEYS:
        sel = _selection(vendor, key)
        runners = selection_runners(sel)
        for job in offload_rows(select_jobs(sel)):
            target = target_from_job(job, runners)
            for gb in host_grid(target.budget_gb, _defaults()[0]["points"]):
                target.tier(gb)  # the planner sizes every point (raises if it refuses one)


def test_an_answer_at_the_ceiling_is_censored() -> None:
    points = [HostPoint(host_gb=gb, gpu_kv_tokens=1, host_kv_tokens=0, max_sessions=64,
                        first_failing=None) for gb in (0.0, 10.0)]
    knee = find_knee(points, ceiling=64)
    assert knee.text.startswith("host 0 GB -> >= 64 sessions (the most the workload offers)")
    below = find_knee([points[0].model_copy(update={"max_sessions": 12, "first_failing": 13})],
                      ceiling=64)
    assert "12 sessions" in below.text and ">=" not in below.text


def test_a_key_with_several_offload_rows_answers_per_row(capsys) -> None:
    key = next(k for v, k in KEYS
               if len(offload_rows(select_jobs(_selection(v, k)))) > 1 and v == "nvidia")
    rows = offload_rows(select_jobs(_selection("nvidia", key)))
    main(["capacity", "--config-files", str(DATA / "nvidia-master.yaml"), "--runner-config",
          str(RUNNERS), "--config-keys", key, "--format", "json", "--points", "2",
          "--max-turns", "2"])
    out = capsys.readouterr()
    docs = json.loads(out.out)
    assert isinstance(docs, list) and len(docs) == len(rows)
    assert len({d["target"]["label"] for d in docs}) == len(rows)
    # progress: a line per host size per row on stderr
    assert out.err.count("3/3 sizes") == len(rows), out.err


@functools.cache
def _defaults() -> tuple[dict, list, Slo]:
    """The command's defaults (its signature's): its engine settings, its workload (64
    synthetic sessions within its bounds) and its SLO."""
    from kvbench.capacity import Slo, WorkloadBounds, sessions_to_traces
    from kvbench.workload.choice import choose_workload, first_turns

    d = {n: p.default for n, p in inspect.signature(capacity_command.capacity).parameters.items()}
    chosen = choose_workload(None, False, d["synthetic_sessions"], d["synthetic_scale"], d["seed"])
    traces = sessions_to_traces(first_turns(chosen.sessions, d["max_turns"]), WorkloadBounds(
        think_time_scale=d["think_time_scale"], think_time_cap_s=d["think_time_cap"],
        max_tokens_cap=d["max_tokens_cap"], max_input_tokens=d["max_input_tokens"]))
    slo = Slo(ttft_p90_ms=d["ttft_p90_ms"], itl_p99_ms=d["itl_p99_ms"],
              interactivity_p50_tok_s=d["interactivity"], failed_ratio=d["max_failed_ratio"])
    return d, traces, slo


@pytest.mark.parametrize(("vendor", "key"), KEYS, ids=[k for _, k in KEYS])
def test_every_offload_row_simulates_the_default_workload_at_its_ceiling(vendor, key) -> None:
    from kvbench.capacity.predict import simulate_step
    from kvbench.sim.engine_config import EngineConfig

    d, traces, slo = _defaults()
    engine = EngineConfig(max_running_requests=d["max_running_requests"],
                          chunked_prefill_tokens=d["chunked_prefill_tokens"])
    sel = _selection(vendor, key)
    runners = selection_runners(sel)
    for job in offload_rows(select_jobs(sel)):
        target = target_from_job(job, runners, engine, d["gpu_tokens"])
        grid = host_grid(target.budget_gb, d["points"])
        for gb in (grid[0], grid[-1]):  # every session at once, without and with the host tier
            step = simulate_step(target, target.tier(gb), traces, slo, len(traces))
            assert step.metrics["requests"] > 0 and step.metrics["errors"] == 0, (gb, step)
