"""The documented cases of the pipeline kvbench succeeds (issue 3, reference/inferencex.md 4)."""

from __future__ import annotations

import pytest
from fixtures.jobs import budget_plan, make_job

from kvbench.units import GB


def test_qwen35_fp8_b300_tp2_gets_144_gb_per_rank_within_599():
    plan = budget_plan(make_job("qwen3.5-fp8-b300-sglang-agentic-mtp"))
    assert plan.budget_gb == 599  # floor(min(2,964,436, 2,861,022) MiB x 2^20 x 0.8 x 2/8 / 1e9)
    assert plan.semantics == "per-pool"  # v0.5.16: --hicache-size applies to KV and Mamba
    assert plan.engine_args[plan.engine_args.index("--hicache-size") + 1] == "144"
    pools = {p.name: p for p in plan.host_pools}
    # KV dtype fp8_e4m3 as qwen3.5_fp8_b300_sglang_mtp.sh runs it: 15 layers x 2 x 256 x 1 B
    # = 7,680 B/token; 144e9 // 7,680 = 18,750,000 tokens -> (292,968 + 1) pages of 64
    assert plan.kv_dtype == "fp8"
    assert pools["kv"].bytes_per_rank == 18_750_016 * 7_680
    # Mamba state in bf16 (--mamba-ssm-dtype bfloat16): 45 layers x (64x128x128 x 2 B SSM +
    # 12,288 conv channels x 3 x 2 B) / TP2 = 48,844,800 B per request per rank;
    # 144e9 // 48,844,800 = 2,948, + 1 slot -> 2,949 states
    assert pools["mamba"].bytes_per_rank == 2_949 * 48_844_800
    # NEXTN draft: one attention layer = 1/15 of the target KV, outside --hicache-size, with
    # the page SGLang adds to the sidecar (kv_cache_builder.py host_to_device_ratio, host_size 0)
    assert pools["draft_kv"].bytes_per_rank == 18_750_080 * 512
    assert not pools["draft_kv"].inside_configured_size
    # per rank 144.00 + 144.05 + 9.60 = 297.65 GB; x 2 ranks = 595.29 GB <= 599 GB
    assert plan.projected_host_bytes == 2 * sum(p.bytes_per_rank for p in plan.host_pools)
    assert round(plan.projected_host_bytes / GB, 2) == 595.29
    assert plan.within_budget and plan.headroom_bytes > 0
    # and 145 would not fit: 2 x (145.00 + 145.01 + 9.67) = 599.35 GB > 599
    assert plan.to_json()["projected-host-gb"] == 595.29


def test_glm52_fp4_b300_tp8_explicit_270_is_refused():
    job = make_job(
        "glm5.2-fp4-b300-sglang-agentic-mtp", model="nvidia/GLM-5.2-NVFP4", precision="fp4",
        tp=8, ep=8, **{"total-cpu-dram-gb": 2399, "exp-name": "glm5.2_tp8_conc12",
                       "kv-offload-backend": {"name": "hicache", "size-gb-per-rank": 270}},
    )
    plan = budget_plan(job)
    pools = {p.name: p.bytes_per_rank / GB for p in plan.host_pools}
    # 270e9 // (78 x 576 B) = 6,009,615 tokens -> 6,009,664 page-aligned
    assert round(pools["kv"], 2) == 270.00
    # indexer mirrors the KV tokens over 78 layers x 132 B: 270 x 132/576 = 61.88 GB
    assert round(pools["indexer"], 2) == 61.88
    # MTP draft sidecar: one of 78 layers: 270 / 78 = 3.46 GB
    assert round(pools["draft_kv"], 2) == 3.46
    assert round(sum(pools.values()), 2) == 335.34
    # 335.34 x 8 = 2,683 GB > 2,399 GB: refused, with the arithmetic and what would fit
    assert round(plan.projected_host_bytes / GB) == 2683
    assert not plan.within_budget
    assert "needs 335.34 GB per rank" in plan.errors[0]
    # usable: 2,399 GB less the default host headroom of 1 GB per rank = 2,391 GB
    assert "x 8 = 2,683 GB > 2,391 GB usable (budget less host headroom)" in plan.errors[0]
    # (2,391 GB / 8 = 298.875 GB per rank) / (1 + 132/576 + 1/78 per GB) -> 240 GB
    assert "largest that fits: --hicache-size 240 GB per rank" in plan.errors[0]
    assert any("270.00 (kv) + 61.88 (indexer, outside) + 3.46 (draft_kv, outside) = 335.34 GB"
               in line for line in plan.arithmetic)
    assert any("2,683 GB > 2,391 GB usable of the 2,399 GB budget" in line
               for line in plan.arithmetic)


def test_an_explicit_size_that_fits_is_honoured():
    job = make_job(**{"kv-offload-backend": {"name": "hicache", "size-gb-per-rank": 100}})
    plan = budget_plan(job)
    assert plan.within_budget
    assert plan.engine_args[plan.engine_args.index("--hicache-size") + 1] == "100"


def test_explicit_size_from_a_recipe_flows_through_the_matrix(tmp_path, shared_data, capsys):
    """GLM-5.2 B300 with the 270 GB per rank the old launcher pinned, written as a recipe."""
    import json

    from kvbench.cli import main

    recipe = tmp_path / "glm.yaml"
    recipe.write_text(
        "glm5.2-fp4-b300-sglang-agentic-mtp:\n"
        "  image: lmsysorg/sglang:v0.5.16-cu130\n"
        "  model: nvidia/GLM-5.2-NVFP4\n"
        "  model-prefix: glm5.2\n"
        "  runner: cluster:b300-nv\n"
        "  precision: fp4\n"
        "  framework: sglang\n"
        "  multinode: false\n"
        "  scenarios:\n"
        "    agentic-coding:\n"
        "    - dram-utilization: 0.80\n"
        "      search-space:\n"
        "      - { tp: 8, ep: 8, spec-decoding: mtp, kv-offloading: dram,\n"
        "          kv-offload-backend: { name: hicache, size-gb-per-rank: 270 },\n"
        "          conc-list: [12] }\n"
    )
    with pytest.raises(SystemExit) as refused:  # every plan refused: a non-zero exit
        main(["plan", "--sizing", "budget", "--config-files", str(recipe), "--runner-config",
              str(shared_data / "inferencex" / "runners.yaml"), "--format", "json"])
    assert refused.value.code == 2
    (plan,) = json.loads(capsys.readouterr().out)
    assert plan["total-cpu-dram-gb"] == 2399  # 2,861,022 MiB x 2^20 x 0.8 x 8/8 / 1e9
    assert not plan["within-budget"]
    assert round(plan["projected-host-gb"]) == 2683
    assert [p["name"] for p in plan["host-pools"]] == ["kv", "indexer", "draft_kv"]


def test_glm52_split_rows_are_sized_as_sglang_allocates():
    """The GLM-5.2 GB200/GB300 rows on v0.5.17 and the 2026-08-05 nightly (split semantics,
    4 ranks per node, 721 GB): the DSA indexer covers all 78 layers and the MTP draft is a
    sidecar, so the old 169 GB/rank (717 GB projected, ~840 GB pinned) becomes 144 GB."""
    from fixtures.inferencex import CONFIGS, RUNNERS

    from kvbench.matrix import Selection, select_jobs

    jobs = [j for j in select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS))
            if j.config_key == "glm5.2-fp4-gb200-dynamo-sglang-agentic-agg"
            and "hicache" in str(j.row.get("kv-offload-backend"))]
    assert jobs
    plan = budget_plan(jobs[0])
    assert plan.semantics == "split" and plan.ranks_on_node == 4 and plan.budget_gb == 721
    # usable (721 - 4 x 1) / 4 = 179.25 GB per rank; per GB of size 1 + 10,296/44,928 +
    # 576/44,928 = 1.2420 -> 144 GB; 144e9 // 44,928 = 3,205,128 -> 50,081 pages of 64
    assert plan.engine_args[plan.engine_args.index("--hicache-size") + 1] == "144"
    pools = {p.name: p.bytes_per_rank for p in plan.host_pools}
    # the draft's sidecar: the KV host slots as a ratio of the device pool, plus SGLang's page
    # (sglang 0.5.17 kv_cache_builder.py:104-118, pool_host/base.py:124-127)
    assert pools == {"kv": 3_205_184 * 44_928, "indexer": 3_205_184 * 78 * 132,
                     "draft_kv": 3_205_248 * 576}
    # 4 x (3,205,184 x 55,224 + 3,205,248 x 576) B = 715.40 GB <= 717 GB usable
    assert plan.projected_host_bytes == 715_397_216_256 and plan.within_budget


def test_a_recipe_write_policy_replaces_the_launchers():
    """`kv-offload-backend.write-policy` (a kvbench extension) is the arm's HiCache policy; the
    launcher's own (qwen3.5 H200: write_through_selective) or SGLang's default applies without
    it."""
    def policy(backend: dict, key: str = "qwen3.5-fp8-h200-sglang-agentic-mtp") -> str | None:
        plan = budget_plan(make_job(key, **{"kv-offload-backend": backend}))
        args = plan.engine_args
        assert plan.hicache_write_policy == args[args.index("--hicache-write-policy") + 1]
        return plan.hicache_write_policy

    assert policy({"name": "hicache"}) == "write_through_selective"
    assert policy({"name": "hicache", "write-policy": "write_back"}) == "write_back"
    resident = budget_plan(make_job("qwen3.5-fp8-h200-sglang-agentic-mtp",
                                 **{"kv-offloading": "none", "kv-offload-backend": None}))
    assert "--hicache-write-policy" not in resident.engine_args
    assert resident.hicache_write_policy is None


def test_a_write_policy_is_refused_on_a_backend_without_one():
    from kvbench.recipe.components import KvOffloadBackend

    assert KvOffloadBackend.model_validate(
        {"name": "hicache", "write-policy": "write_through_selective"}).write_policy \
        == "write_through_selective"
    with pytest.raises(ValueError, match="write-policy is a HiCache setting"):
        KvOffloadBackend.model_validate({"name": "lmcache", "write-policy": "write_through"})
    with pytest.raises(ValueError, match="write_through_selective"):
        KvOffloadBackend.model_validate({"name": "hicache", "write-policy": "sometimes"})
