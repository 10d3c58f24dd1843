"""Plan vs what SGLang allocated, from its server log (issue 37 item 3)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvbench.results.allocation import (
    engine_allocation,
    format_rows,
    plan_vs_allocated,
    rss_growth_row,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang"


def test_the_recorded_0517_log_matches_the_plan_of_its_job():
    """SGLang 0.5.17 on the H200 (Qwen3-8B, HiCache 24 GB, GPU KV capped): the host pool is the
    plan's to the token; the device pool was capped by --max-total-tokens, which that job's plan
    (written before the planner read the caps) did not know."""
    alloc = engine_allocation((DATA / "server-0.5.17-qwen3-8b-hicache.excerpt.log").read_text())
    assert (alloc.device_kv_tokens, alloc.max_running_requests) == (43_648, 8)
    assert alloc.device_kv == [(43_648, 6.0)]
    assert alloc.host == {"kv": (162_816, 24.01)}
    plan = json.loads((DATA / "plan-0.5.17-qwen3-8b-hicache.json").read_text())
    rows = {r.pool: r for r in plan_vs_allocated(plan, alloc)}
    assert (rows["host kv"].planned, rows["host kv"].allocated, rows["host kv"].diff) == (
        162_816, 162_816, 0)
    assert rows["device kv"].planned == 673_014 and rows["device kv"].allocated == 43_648
    assert rows["device kv"].diff_pct == pytest.approx(-93.51, abs=0.01)
    assert format_rows(list(rows.values()))[1].startswith("device kv")


def test_hybrid_pools_are_read_and_compared_pool_by_pool():
    """The Qwen3.5 HiCache + MTP arm on the H200 (issue 37): the target's and the draft's
    device KV, the Mamba states with their speculative intermediates, and the three host pools
    (the Mamba pool in GB: SGLang prints no slot count)."""
    log = (DATA / "server-0.5.17-qwen3.5-capped-hicache.excerpt.log").read_text()
    alloc = engine_allocation(log)
    assert (alloc.device_kv_tokens, alloc.max_running_requests) == (43_648, 16)
    assert alloc.state_slots == 80 and alloc.state_device_gb["intermediate_ssm"] == 0.8
    assert alloc.device_kv == [(43_648, 0.08), (43_648, 0.04)]  # target, then the MTP draft
    assert alloc.host == {"kv": (688_960, 1.41), "mamba": (None, 30.6),
                          "draft_kv": (689_024, 0.71)}
    plan = {"gpu-kv-tokens": 43_648, "gpu-state-slots": 80, "projected-host-bytes": 0,
            "host-pools": [
                {"name": "kv", "units": 688_960, "bytes-per-rank": 688_960 * 2_048},
                {"name": "mamba", "units": 2_349, "bytes-per-rank": 2_349 * 13_025_280},
                {"name": "draft_kv", "units": 689_024, "bytes-per-rank": 689_024 * 1_024}]}
    rows = {r.pool: r for r in plan_vs_allocated(plan, alloc)}
    assert list(rows) == ["device kv", "device mamba", "host kv", "host mamba", "host draft_kv"]
    assert all(r.diff == 0 for n, r in rows.items() if r.unit != "GB")
    mamba = rows["host mamba"]  # SGLang prints no slot count: bytes, within its 2 decimals
    assert mamba.unit == "GB" and abs(mamba.diff) < 0.005 and mamba.within == 0.0


def test_scheduler_rss_growth_against_the_projected_footprint():
    """Session 6's samples (benchmarks/results/h200/sglang/runs): peak scheduler RSS with the
    24 GB host pool less the resident arm's, against the plan's 24,008,196,096 B."""
    runs = DATA.parents[2] / "benchmarks" / "results" / "h200" / "sglang" / "runs"

    def samples(name: str) -> list[dict]:
        with gzip.open(runs / name / "memory.jsonl.gz", "rt") as f:
            return [json.loads(line) for line in f]

    plan = json.loads((DATA / "plan-0.5.17-qwen3-8b-hicache.json").read_text())
    row = rss_growth_row(plan, samples("selective-c4"), samples("resident-c4"))
    assert row is not None and row.planned == pytest.approx(24.008, abs=0.001)
    assert 0 < row.diff_pct < 1  # the pool plus the HiCache controller's own allocations
