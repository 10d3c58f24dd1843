"""Each backend's knob, units and per-rank arithmetic (hand-computed, inline)."""

from __future__ import annotations

import json

import pytest
from fixtures.jobs import budget_plan, make_job

from kvbench.plan.sizers.hicache_semantics import hicache_semantics
from kvbench.plan.version import image_version
from kvbench.units import GB, GiB

MINIMAX_B300 = {"image": "vllm/vllm-openai:v0.27.1", "model": "nvidia/MiniMax-M3-NVFP4",
                "precision": "fp4", "framework": "vllm", "tp": 4, "ep": 1}


def plan0(job):
    """A knob's unit arithmetic alone: no host headroom (test_headroom.py covers it)."""
    return budget_plan(job, host_headroom_gb=0)


def arg(plan, flag):
    return plan.engine_args[plan.engine_args.index(flag) + 1]


def test_vllm_native_size_is_gib_for_the_whole_engine():
    # v0.33 pins the native pool as one exactly-registered region (no per-tensor rounding)
    plan = plan0(make_job(**{**MINIMAX_B300, "image": "vllm/vllm-openai:v0.33.0"}, **{
        "total-cpu-dram-gb": 1024, "kv-offload-backend": {"name": "vllm-native"}}))
    # per rank 1,024e9 / 4 = 256e9 B; engine total 4 x 256e9 / 2^30 = 953.67 GiB (floor 0.01)
    assert arg(plan, "--kv-offloading-size") == "953.67"
    per_rank = plan.host_pools[0].bytes_per_rank
    # vLLM pins 953.67 x 2^30 = 1,023,995,365,294.08 B over 4 ranks; rounded up per rank
    assert per_rank == 255_998_841_324
    assert per_rank * 4 <= 1024 * GB and plan.within_budget
    assert "VLLM_USE_SIMPLE_KV_OFFLOAD" not in plan.engine_env


QWEN3_8B_H200 = {"image": "vllm/vllm-openai:v0.26.0", "model": "Qwen/Qwen3-8B",
                 "precision": "bf16", "framework": "vllm", "tp": 1, "ep": 1,
                 "runner": "h200", "total-cpu-dram-gb": 68}


def test_vllm_026_native_pins_each_kv_tensor_rounded_to_a_power_of_two():
    """The H200 run (benchmarks/results/h200/vllm/): --kv-offloading-size 22.35 on Qwen3-8B.
    Blocks: 16 tokens x 147,456 B = 2,359,296 B; 22.35 x 2^30 // that = 10,171 blocks; each of
    the 36 layer tensors holds 10,171 x 65,536 B = 666.6 MB, pinned as 2^30 B: 36 GiB in all.
    The engine's shared memory grew by 38.66 GB (resident arm's baseline subtracted)."""
    plan = budget_plan(make_job(**QWEN3_8B_H200, **{
        "kv-offload-backend": {"name": "vllm-native", "size-gb-per-rank": 24}}))
    assert arg(plan, "--kv-offloading-size") == "22.35"
    assert plan.host_pools[0].bytes_per_rank == 36 * GiB == 38_654_705_664
    assert plan.host_kv_tokens == 10_171 * 16
    measured_bytes = 38_661_000_000  # RssShmem 38.684 GB - resident 0.023 GB
    assert abs(plan.host_pools[0].bytes_per_rank - measured_bytes) / measured_bytes < 0.001
    # the simple connector registers what it allocated: 10,171 blocks exactly
    simple = budget_plan(make_job(**QWEN3_8B_H200, **{
        "kv-offload-backend": {"name": "vllm-simple", "size-gb-per-rank": 24}}))
    # upper bound: vLLM's float 22.35 x 2^30 = 23,998,129,766.4 B, rounded up
    assert simple.host_pools[0].bytes_per_rank == 23_998_129_767
    assert simple.host_kv_tokens == 10_171 * 16


def test_vllm_simple_names_the_connector_and_dp_attention_gives_each_engine_its_own_size():
    plan = plan0(make_job(**MINIMAX_B300, **{
        "dp-attn": True, "total-cpu-dram-gb": 1199,
        "kv-offload-backend": {"name": "vllm-simple"}}))
    assert plan.engine_args == [] and "VLLM_USE_SIMPLE_KV_OFFLOAD" not in plan.engine_env
    connector = plan.engine_config["kv-transfer-config"]
    assert connector["kv_connector"] == "SimpleCPUOffloadConnector"
    assert connector["kv_role"] == "kv_both"
    # one engine per DP rank (world 1): the per-rank size, 1,199e9 / 4 / 2^30 = 279.16 GiB
    # (floored to 0.01), in bytes as vLLM converts it: 279.16 x 2^30
    gib = int(1199 * GB / 4 / GiB * 100) / 100
    assert gib == 279.16
    assert connector["kv_connector_extra_config"] == {"cpu_bytes_to_use": int(gib * GiB)}
    assert int(gib * GiB) <= 1199 * GB / 4


def test_lmcache_is_per_worker_and_read_as_gib():
    plan = plan0(make_job(**MINIMAX_B300, **{
        "total-cpu-dram-gb": 299, "kv-offload-backend": {"name": "lmcache", "version": "0.4.5"}}))
    # 299e9 / 4 ranks = 74.75e9 B per rank = 69.6 GiB -> 69.6 (x 1024^3 B) per worker
    assert plan.engine_env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "69.6"
    assert plan.host_pools[0].bytes_per_rank == int(696 * GiB / 10)
    assert json.loads(arg(plan, "--kv-transfer-config"))["kv_connector"] == "LMCacheConnectorV1"


def test_lmcache_05_runs_one_server_per_rank_with_an_l1_in_gib():
    plan = plan0(make_job(**MINIMAX_B300, **{
        "total-cpu-dram-gb": 299, "kv-offload-backend": {"name": "lmcache", "version": "0.5.3"}}))
    # the same 69.6 GiB per rank, now each server's --l1-size-gb (x 2^30 B)
    assert plan.engine_config["lmcache-mp"] == {"servers": 4, "l1_size_gb": "69.6",
                                                "l1_init_size_gb": "10", "chunk_size": 256}
    assert plan.host_pools[0].name == "lmcache_l1"
    assert plan.host_pools[0].bytes_per_rank == int(696 * GiB / 10)
    assert plan.engine_args == [] and plan.engine_env == {}  # the adapter wires the servers


def test_mooncake_segment_leaves_room_for_the_local_buffer():
    plan = plan0(make_job(**MINIMAX_B300, **{
        "total-cpu-dram-gb": 1199, "kv-offload-backend": {"name": "mooncake"}}))
    seg, buf = plan.host_pools
    # 1,199e9 / 4 = 299.75e9 per rank - the "4GB" local buffer, which vLLM reads as 4 x 2^30
    # = 4,294,967,296 B, = 295,455,032,704 B, floored to MB: 295,455e6 B of segment
    assert seg.bytes_per_rank == 295_455 * 10**6 and buf.bytes_per_rank == 4 * GiB
    assert plan.engine_config["mooncake.json"]["local_buffer_size"] == "4GB"
    assert not buf.inside_configured_size
    assert plan.engine_config["mooncake.json"]["global_segment_size"] == seg.bytes_per_rank


def test_trtllm_host_cache_is_bytes_per_rank():
    trt = {**MINIMAX_B300, "framework": "trt",
           "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc23.post1"}
    plan = plan0(make_job(**trt, **{"total-cpu-dram-gb": 599,
                                       "kv-offload-backend": {"name": "native"}}))
    # 599e9 / 4 = 149.75e9 B per rank
    assert plan.engine_config["kv_cache_config"]["host_cache_size"] == 149_750 * 10**6
    assert plan.page_size_tokens == 32 and plan.engine_args == []


def test_split_semantics_before_0518_keeps_the_draft_a_sidecar():
    plan = budget_plan(make_job(image="lmsysorg/sglang:v0.5.17-cu130"))
    assert plan.semantics == "split"
    pools = {p.name: p for p in plan.host_pools}
    assert set(pools) == {"kv", "mamba", "draft_kv"}
    assert not pools["draft_kv"].inside_configured_size
    # fp8 KV 7,680 B/token; the draft mirrors its tokens at 512 B (one attention layer), the
    # KV host slots as a ratio of the device pool plus the page SGLang adds (sglang 0.5.17
    # kv_cache_builder.py:104-118, pool_host/base.py:124-127)
    assert pools["kv"].bytes_per_rank % 7_680 == 0
    tokens = pools["kv"].bytes_per_rank // 7_680
    assert pools["draft_kv"].bytes_per_rank == (tokens + 64) * 512
    size = int(arg(plan, "--hicache-size")) * GB
    # proportional split: KV and Mamba together stay within one --hicache-size (+1 page of
    # 64 tokens, +1 bf16 state of 48,844,800 B)
    assert pools["kv"].bytes_per_rank + pools["mamba"].bytes_per_rank <= (
        size + 64 * 7_680 + 48_844_800)
    assert plan.within_budget


def test_split_semantics_from_0518_packs_the_draft_layers():
    plan = budget_plan(make_job(image="lmsysorg/sglang:v0.5.18-cu130"))
    pools = {p.name: p for p in plan.host_pools}
    assert set(pools) == {"kv", "mamba"}  # draft packed into kv: (7,680 + 512) B per token
    assert pools["kv"].bytes_per_rank % (7_680 + 512) == 0


def test_indexer_covers_every_layer_in_split_semantics():
    """GLM-5.2 TP8 on a split image (nightly 2026-08-05): the DSA indexer host pool has one
    buffer per KV layer (78 x 132 B), and the MTP draft is a sidecar (1 x 576 B)."""
    job = make_job(image="lmsysorg/sglang:nightly-dev-cu13-20260805-211ee642",
                   model="nvidia/GLM-5.2-NVFP4", precision="fp4", tp=8,
                   **{"total-cpu-dram-gb": 2399, "model-prefix": "glm5.2"})
    plan = budget_plan(job)
    pools = {p.name: p.bytes_per_rank for p in plan.host_pools}
    # per rank (2,399 GB - 8 x 1 GB host headroom) / 8 = 298.875 GB; per GB of --hicache-size:
    # 1 + 10,296/44,928 + 576/44,928 = 1.2420 -> 240 GB (241 would need 299.32 GB)
    # 240e9 // 44,928 = 5,341,880 tokens -> 83,467 pages of 64 = 5,341,888
    assert arg(plan, "--hicache-size") == "240"
    assert pools["kv"] == 5_341_888 * 44_928
    assert pools["indexer"] == 5_341_888 * 78 * 132  # 55.00 GB, not 21 layers' 14.81 GB
    assert pools["draft_kv"] == (5_341_888 + 64) * 576  # the sidecar's page
    # 8 x (5,341,888 x (44,928 + 10,296) + 5,341,952 x 576) B = 2,384.62 GB <= 2,391 GB usable
    assert plan.projected_host_bytes == 8 * sum(pools.values()) == 2_384_619_098_112
    assert plan.within_budget


@pytest.mark.parametrize(("image", "expected"), [
    ("lmsysorg/sglang:v0.5.12-cu130", ("per-pool", True)),
    ("lmsysorg/sglang:v0.5.16-cu130", ("per-pool", False)),
    ("lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260813", ("split", False)),
    ("lmsysorg/sglang:nightly-dev-cu13-20260719-99f5a6f4", ("per-pool", False)),
    ("lmsysorg/sglang:dev-nightly-0820", ("split", False)),
    ("my/sglang:latest", ("per-pool", False)),
])
def test_semantics_from_image_tag(image, expected):
    sem = hicache_semantics(image_version(image))
    assert (sem.name, sem.is_g1) == expected


def test_v0512_pins_the_exact_size():
    """v0.5.12 allocates with torch.empty and pins with cudaHostRegister: no power-of-two."""
    plan = budget_plan(make_job(image="lmsysorg/sglang:v0.5.12-cu130"))
    assert plan.within_budget
    assert plan.projected_host_bytes == 2 * sum(p.bytes_per_rank for p in plan.host_pools)


def test_deepseek_v4_is_ratio_only_and_sized_on_the_device_pool_estimate():
    job = make_job(image="lmsysorg/sglang:v0.5.17-cu130", model="deepseek-ai/DeepSeek-V4-Pro",
                   precision="fp4", tp=8, **{"total-cpu-dram-gb": 2399, "model-prefix": "dsv4"})
    plan = budget_plan(job)
    assert "--hicache-size" not in plan.engine_args
    ratio = float(arg(plan, "--hicache-ratio"))
    # device pools: 288 GB x 0.88 (dsv4_fp4_b300_sglang_mtp.sh) - weights/rank, less the MTP
    # draft worker's share x 61/62 (sglang 0.5.17 pool_configurator.py:670-677);
    # ratio = floor10(per-rank budget / device pools)
    assert plan.mem_fraction_static == 0.88
    weights = 900e9 / 8  # published-size estimate of the fp4-expert checkpoint
    device = (int(288e9 * 0.88) - weights) * 61 / 62
    per_rank_budget = (2399 - 8) * GB / 8
    assert ratio == pytest.approx(int(per_rank_budget / device * 10) / 10, abs=0.1)
    assert plan.projected_host_bytes <= (2399 - 8) * GB and plan.within_budget
    assert any("x 61/62" in line for line in plan.arithmetic)


def test_no_offload_row_has_no_host_pools():
    plan = budget_plan(make_job(**{"kv-offloading": "none", "total-cpu-dram-gb": 0,
                                "kv-offload-backend": None}))
    assert plan.backend is None and plan.host_pools == [] and plan.within_budget
    assert plan.gpu_kv_tokens > 0


@pytest.mark.parametrize(("over", "needle"), [
    ({"model": "acme/Imaginary-9T"}, "no model profile"),
    ({"framework": "tgi"}, "framework 'tgi' has no engine"),
    ({"kv-offload-backend": {"name": "mooncake"}}, "runs on vllm"),
    ({"kv-offload-backend": {"name": "floppy"}}, "unknown offload backend"),
    ({"total-cpu-dram-gb": 0}, "smallest host pools exceed"),
])
def test_bad_rows_become_clear_refusals(over, needle):
    plan = budget_plan(make_job(**over))
    assert not plan.within_budget
    assert needle in plan.errors[0]


def test_pp_and_dcp_shard_the_per_token_pools():
    kimi = {"image": "vllm/vllm-openai:v0.27.1", "model": "moonshotai/Kimi-K3",
            "precision": "fp4", "framework": "vllm", "tp": 8, "ep": 1,
            "total-cpu-dram-gb": 2249, "kv-offload-backend": {"name": "mooncake"}}
    base = budget_plan(make_job(**kimi))
    dcp = budget_plan(make_job(**kimi, **{"dcp-size": 8}))
    pp = budget_plan(make_job(**{**kimi, "tp": 4, "pp": 2}))
    segment = base.host_pools[0].bytes_per_rank
    # 24 MLA layers x 576 x 2 B = 27,648 B per token on every TP rank; dcp 8 -> 3,456
    assert base.host_kv_tokens == int(segment * 0.8) // 27_648
    assert dcp.host_kv_tokens == int(segment * 0.8) // 3_456
    # pp 2 keeps half the layers per rank: 13,824 B per token
    assert pp.host_kv_tokens == int(pp.host_pools[0].bytes_per_rank * 0.8) // 13_824


def test_sglang_sizes_the_mamba_pool_from_the_memory_after_weights():
    """_handle_max_mamba_cache with the radix cache on: the states take 0.9 / 1.9 of the rest;
    MTP (4 draft tokens) also reserves intermediates for min(max_running, slots / 5) requests
    (5 slots per running request: 3 + the extra_buffer ping-pong's 2 under the overlap
    schedule, sglang 0.5.17 kv_cache_configurator.py:1659-1688)."""
    from kvbench.plan.gpu import sglang_mamba_pool

    # budget 30e9 x 0.9 / 1.9 = 14,210,526,315.8 B; per request 48,844,800 B (bf16, TP2)
    # slots = (budget - 5 x 48,844,800) // (48,844,800 x (1 + 4/5)) = 158
    # intermediates: min(64, 158 // 5 = 31) + 1 = 32 requests x 4 draft tokens
    assert sglang_mamba_pool(30_000_000_000, 48_844_800, draft_tokens=4, max_running=64) == (
        158, 159 * 48_844_800 + 32 * 4 * 48_844_800)
    # without speculative decoding: (budget - 48,844,800) // 48,844,800 = 289 slots (+1 pad)
    assert sglang_mamba_pool(30_000_000_000, 48_844_800, draft_tokens=0, max_running=64) == (
        289, 290 * 48_844_800)


QWEN3_8B_H200_SGLANG = {**QWEN3_8B_H200, "image": "lmsysorg/sglang:v0.5.17",
                        "framework": "sglang", "spec-decoding": "none", "model-prefix": "qwen3-8b",
                        "kv-offload-backend": {"name": "hicache", "size-gb-per-rank": 24}}


def test_sglang_0517_hicache_pool_equals_what_the_h200_server_allocated():
    """SGLang 0.5.17 on the H200 (benchmarks/results/h200/sglang/attempt-1/server.log):
    "Allocating kv hierarchical KV host pool: 162816 tokens, 24.01 GB host memory". Qwen3-8B:
    36 layers x K,V x 8 heads x 128 x 2 B = 147,456 B per token; 24e9 B / 147,456 = 162,760.4
    tokens, which SGLang takes up to whole 64-token pages: 2,544 x 64 = 162,816 tokens."""
    plan = budget_plan(make_job(**QWEN3_8B_H200_SGLANG))
    [pool] = plan.host_pools
    assert pool.units == plan.host_kv_tokens == 162_816
    assert pool.bytes_per_rank == 162_816 * 147_456 == 24_008_196_096


def test_the_fa3_hicache_rewrite_warning_stops_at_0513():
    # ServerArgs rewrote HiCache + FA3 decode up to 0.5.13; 0.5.14+ keeps the backends as given
    warned = "Hopper: kernel io with the default FA3 decode backend"
    old = budget_plan(make_job(**{**QWEN3_8B_H200_SGLANG, "image": "lmsysorg/sglang:v0.5.13"}))
    new = budget_plan(make_job(**QWEN3_8B_H200_SGLANG))
    assert any(warned in w for w in old.warnings)
    assert not any(warned in w for w in new.warnings)


MINIMAX_H100 = {"image": "vllm/vllm-openai:v0.27.1", "model": "MiniMaxAI/MiniMax-M3",
                "model-prefix": "minimaxm3", "precision": "fp8", "framework": "vllm",
                "runner": "h100", "tp": 8, "ep": 1}


def test_weights_kept_in_host_memory_come_out_of_the_host_budget():
    """minimaxm3_fp8_h100_mtp.sh:57,131 (InferenceX 843c6254f): --cpu-offload-gb 26, 26 GiB of
    each rank's weights in host memory (vLLM: "the space in GiB to offload to CPU, per GPU")."""
    resident = plan0(make_job(**MINIMAX_H100, **{"kv-offloading": "none"}))
    assert resident.engine_args == ["--cpu-offload-gb", "26"]
    plan = plan0(make_job(**MINIMAX_H100, **{
        "total-cpu-dram-gb": 1731, "kv-offload-backend": {"name": "mooncake"}}))
    assert plan.engine_args[:2] == ["--cpu-offload-gb", "26"]
    pools = {p.name: p.bytes_per_rank for p in plan.host_pools}
    assert pools["weights_cpu_offload"] == 26 * GiB
    # 1,731e9 / 8 = 216.375e9 per rank - 26 GiB weights - the 4 GiB local buffer
    # = 184,162,745,280 B, floored to MB: 184,162e6 B of segment
    assert pools["mooncake_segment"] == 184_162 * 10**6
    assert plan.projected_host_bytes == 8 * sum(pools.values()) <= 1731 * GB
    assert plan.within_budget
    # HBM holds the weights less the offloaded 26 GiB
    full = budget_plan(make_job(**{**MINIMAX_H100, "runner": "h200"}, **{"kv-offloading": "none"}))
    assert "less 26 GiB in host memory" in plan.arithmetic[0]
    assert "less" not in full.arithmetic[0]
