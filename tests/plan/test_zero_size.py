"""A size that rounds to 0 is never "no host pool" to the engine: `kvbench plan` refuses it,
naming the field and what the engine would do with 0."""

from __future__ import annotations

import json

from fixtures.jobs import budget_plan, make_job
from fixtures.recipes import SINGLE, valid_recipe, write_recipe

from kvbench.cli import main

VLLM_ROW = {"image": "vllm/vllm-openai:v0.27.1", "model": "nvidia/MiniMax-M3-NVFP4",
            "model-prefix": "minimaxm3", "precision": "fp4", "framework": "vllm", "tp": 4,
            "ep": 1, "total-cpu-dram-gb": 1024}


def _hicache_recipe(tmp_path, size_gb_per_rank):
    data = valid_recipe()
    entry = data[SINGLE]["scenarios"]["agentic-coding"][0]["search-space"][2]
    entry["kv-offload-backend"] = {"name": "hicache", "size-gb-per-rank": size_gb_per_rank}
    entry["conc-list"] = [32]
    return write_recipe(tmp_path, data)


def test_plan_cli_refuses_hicache_size_zero_with_sglangs_meaning(tmp_path, capsys):
    recipe = _hicache_recipe(tmp_path, 0.4)
    main(["plan", "--sizing", "budget", "--config-files", str(recipe), "--format", "json"])
    plans = [p for p in json.loads(capsys.readouterr().out)
             if p["config-key"] == SINGLE and p["backend"] == "hicache"]
    assert plans and not any(p["within-budget"] for p in plans)
    error = plans[0]["errors"][0]
    assert error.startswith("kv-offload-backend.size-gb-per-rank 0.4 rounds down to "
                            "--hicache-size 0 GB per rank, which is refused")
    assert "--hicache-ratio (default 2.0), twice the device pool" in error


def test_a_budget_that_fits_under_one_gb_is_refused_not_sized_to_zero():
    # total-cpu-dram-gb 3 - 2 x 1 GB host headroom over TP2 = 0.50 GB per rank: the largest
    # whole-GB size is 0
    plan = budget_plan(make_job(**{"total-cpu-dram-gb": 3}))
    assert not plan.within_budget
    assert plan.errors[0].startswith("total-cpu-dram-gb 3 (1.00 GB after host headroom) over 2 "
                                     "rank(s) = 0.50 GB per rank "
                                     "fits only --hicache-size 0 GB per rank")


def test_vllm_kv_offloading_size_zero_is_refused():
    plan = budget_plan(make_job(**VLLM_ROW, **{
        "kv-offload-backend": {"name": "vllm-native", "size-gb-per-rank": 0.001}}))
    # 0.001 GB x 4 ranks / (2^30 / 100) = 0.37 centi-GiB -> 0.00 GiB
    assert not plan.within_budget
    assert plan.errors[0].startswith(
        "kv-offload-backend.size-gb-per-rank 0.001 rounds down to --kv-offloading-size 0.00 GiB")
    assert "cpu_bytes_to_use 0, which its CPU offloading spec rejects" in plan.errors[0]


def test_mooncake_segment_zero_is_refused():
    plan = budget_plan(make_job(**VLLM_ROW, **{
        "kv-offload-backend": {"name": "mooncake", "size-gb-per-rank": 0.0005}}))
    # 0.0005 GB = 0.5 MB -> global_segment_size 0 MB
    assert not plan.within_budget
    assert "global_segment_size 0.00 GB per rank, which is refused" in plan.errors[0]
    assert "mounts no memory into the store" in plan.errors[0]


def test_one_gb_is_still_a_plan():
    plan = budget_plan(make_job(**{"kv-offload-backend": {"name": "hicache",
                                                        "size-gb-per-rank": 1}}))
    assert plan.within_budget and "--hicache-size" in plan.engine_args
    assert plan.engine_args[plan.engine_args.index("--hicache-size") + 1] == "1"
