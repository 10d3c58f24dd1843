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
            "page-size-tokens": 64, "host-pools": [
                {"name": "kv", "units": 688_960, "bytes-per-rank": 688_960 * 2_048,
                 "unit-bytes": 2_048},
                {"name": "mamba", "units": 2_349, "bytes-per-rank": 2_349 * 13_025_280},
                {"name": "draft_kv", "units": 689_024, "bytes-per-rank": 689_024 * 1_024,
                 "unit-bytes": 1_024}]}
    rows = {r.pool: r for r in plan_vs_allocated(plan, alloc)}
    assert list(rows) == ["device kv", "device kv size", "device draft_kv",
                          "device draft_kv size", "device mamba", "host kv", "host mamba",
                          "host draft_kv"]
    assert all(r.diff == 0 for n, r in rows.items() if r.unit in ("tokens", "slots"))
    # K and V printed apart, two decimals each: (43,648 + 64) x 2,048 B = 0.083 GiB, "0.04 + 0.04"
    assert rows["device kv size"].planned == pytest.approx(0.0834, abs=1e-4)
    assert rows["device kv size"].allocated == 0.08 and rows["device kv size"].within == 0.0
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


# SGLang 0.5.17's start-up lines for the scaled DeepSeek-V3 (MLA + NextN draft + HiCache), written
# from its format strings (no GPU run of this model exists yet; the file is ours, not a log):
# the scheduler line (managers/scheduler.py:1068-1076), MLATokenToKVPool's one latent buffer
# per layer logged as "KV size" (mem_cache/memory_pool.py:1655-1681 via :3956-3958), the
# target's pool then the
# NextN draft's one-layer pool, and MLATokenToKVPoolHost's lines for the target and the draft
# (pool_host/base.py:153-158, pool_host/mla.py, kv_cache_builder.py:104-121). The sizes are
# SGLang's arithmetic for --max-total-tokens 43680, page 64, --hicache-size 32: device
# (43,648 + 64) x 576 x 2 B x 4 layers = 0.19 GiB, draft x 1 layer = 0.05 GiB; host
# 32e9 // 4,608 = 6,944,444 -> (// 64 + 1) x 64 = 6,944,448 tokens; the draft's at the same
# ratio to its device pool, 6,944,448 -> 6,944,512 tokens, x 1,152 B.
MLA_LOG = (DATA / "server-0.5.17-dsv3-scaled-mla.synthetic.log").read_text()


def test_mla_pools_are_read_from_their_single_latent_buffer_lines():
    alloc = engine_allocation(MLA_LOG)
    assert (alloc.device_kv_tokens, alloc.max_running_requests) == (43_648, 16)
    assert alloc.device_kv == [(43_648, 0.19), (43_648, 0.05)]  # target, then the draft
    assert alloc.host == {"kv": (6_944_448, 32.0), "draft_kv": (6_944_512, 8.0)}
    assert alloc.state_slots is None and alloc.state_device_gb == {}


def test_mla_pools_against_kvbenchs_plan_of_the_recipe_row():
    """The plan of benchmarks/gpu/mla/recipe.yaml's capped HiCache + MTP arm (run.sh hicache:8)
    against those lines, pool by pool: every token count exact, the device GiB the tokens plus a
    page at the MLA latent's 4,608 and 1,152 B per token."""
    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job
    from kvbench.recipe import load_runners

    recipe = DATA.parents[2] / "benchmarks" / "gpu" / "mla" / "recipe.yaml"
    (job,) = [j for j in select_jobs(Selection(
        config_files=(recipe,), min_conc=8, max_conc=8,
        config_keys=("dsv3-bf16-h200-sglang-agentic-mtp",)))
        if j.row["kv-offloading"] == "dram"]
    plan = plan_job(job, load_runners(recipe.parent / "runners.yaml"), engine_args=[
        "--attention-backend=triton", "--sampling-backend=pytorch", "--disable-cuda-graph",
        "--max-total-tokens=43680", "--max-running-requests=16"]).to_json()
    rows = {r.pool: r for r in plan_vs_allocated(plan, engine_allocation(MLA_LOG))}
    assert list(rows) == ["device kv", "device kv size", "device draft_kv",
                          "device draft_kv size", "host kv", "host draft_kv"]
    assert {n: (r.planned, r.allocated) for n, r in rows.items() if r.unit == "tokens"} == {
        "device kv": (43_648, 43_648), "device draft_kv": (43_648, 43_648),
        "host kv": (6_944_448, 6_944_448), "host draft_kv": (6_944_512, 6_944_512)}
    assert rows["device kv size"].planned == pytest.approx(43_712 * 4_608 / 2**30)
    assert rows["device draft_kv size"].planned == pytest.approx(43_712 * 1_152 / 2**30)
    assert all(r.within == 0.0 for r in rows.values())
    # a wrong latent width (the 128 heads' K and V, 128 x 192 + 128 x 128 x 2 B) would show
    mha = {**plan, "host-pools": [{**p, "unit-bytes": 4 * 128 * 320 * 2}
                                  for p in plan["host-pools"] if p["name"] == "kv"]}
    off = {r.pool: r for r in plan_vs_allocated(mha, engine_allocation(MLA_LOG))}
    assert off["device kv size"].within > 0.9  # 0.19 GiB logged, 13.3 planned
