"""SGLang's device-pool caps among a job's engine flags size the plan's GPU pools as the engine
does, and so the proportional HiCache split of a hybrid model (issue 37: the Qwen3.5 arms run
with --max-total-tokens, --max-mamba-cache-size and --max-running-requests)."""

from __future__ import annotations

from pathlib import Path

from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job
from kvbench.plan.gpu import engine_caps
from kvbench.recipe import load_runners

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "benchmarks" / "gpu" / "qwen3.5" / "recipe.yaml"
CAPS = ["--max-total-tokens=43680", "--max-mamba-cache-size", "80",
        "--max-running-requests=16", "--attention-backend=triton"]


def test_engine_caps_reads_both_spellings_and_ignores_other_flags():
    assert engine_caps(CAPS) == {"max_total_tokens": 43_680, "max_mamba_cache_size": 80,
                                 "max_running_requests": 16}
    assert engine_caps(["--max-total-tokens", "many"]) == {}


def test_capped_pools_set_the_hybrid_hicache_split():
    (job,) = [j for j in select_jobs(Selection(
        config_files=(RECIPE,), min_conc=8, config_keys=("qwen3.5-bf16-h200-sglang-agentic-mtp",)))
        if j.row["kv-offloading"] == "dram"]
    plan = plan_job(job, load_runners(RECIPE.parent / "runners.yaml"), engine_args=CAPS)
    # KV: 43,680 tokens page-aligned (64) down: 43,648 x 2 full layers x K,V x 2 heads x 256 x
    # fp8 = 89,391,104 B. Mamba: 81 slots (80 + pad) x 13,025,280 B (6 GDN layers, bf16 SSM) +
    # speculative intermediates for min(16, 80 // 5) + 1 = 17 requests x 4 draft tokens.
    kv_dev, mamba_dev = 43_648 * 2_048, 81 * 13_025_280 + 17 * 4 * 13_025_280
    assert plan.gpu_kv_tokens == 43_648
    kv_gb = 32 * kv_dev / (kv_dev + mamba_dev)  # hybrid_pool_assembler._split_hicache_size
    kv_tokens = (int(kv_gb * 1e9 // 2_048) // 64 + 1) * 64
    slots = int((32 - kv_gb) * 1e9 // 13_025_280) + 1
    pools = {p.name: (p.units, p.bytes_per_rank) for p in plan.host_pools}
    assert pools == {"kv": (kv_tokens, kv_tokens * 2_048),
                     "mamba": (slots, slots * 13_025_280),
                     "draft_kv": (kv_tokens, kv_tokens * 1_024)}
    assert (kv_tokens, slots) == (688_000, 2_349)
    assert any("engine caps" in line for line in plan.arithmetic)
