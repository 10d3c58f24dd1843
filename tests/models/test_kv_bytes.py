"""KV bytes per pool per rank, hand-computed from the config.json fields (arithmetic inline)."""

from __future__ import annotations

import pytest

from kvbench.models import load_model


def pools(name: str, tp: int, dtype: str, dp_attention: bool = False) -> dict:
    m = load_model(name)
    return {p.name: p for p in m.kv_pools(tp, dp_attention=dp_attention, kv_dtype=dtype)}


def test_gqa_llama_70b_splits_heads_over_tp():
    # 2 (K,V) x 80 layers x 8 kv heads x 128 head_dim x 2 B (bf16) = 327,680 B at TP1
    assert pools("meta-llama/Llama-3.1-70B-Instruct", 1, "bf16")["kv"].bytes_per_token_per_rank \
        == 2 * 80 * 8 * 128 * 2 == 327_680
    # TP8: 8 heads / 8 ranks = 1 head per rank -> 2 x 80 x 1 x 128 x 2 = 40,960
    kv = pools("meta-llama/Llama-3.1-70B-Instruct", 8, "bf16")["kv"]
    assert kv.bytes_per_token_per_rank == 40_960
    assert not kv.replicated
    # fp8 halves it: 20,480
    assert pools("llama-3.1-70b", 8, "fp8")["kv"].bytes_per_token_per_rank == 20_480


def test_gqa_heads_replicate_when_fewer_than_ranks():
    # Qwen3.5 has 2 KV heads: at TP8 each rank still holds 1 head (replicated 4x)
    kv = pools("Qwen/Qwen3.5-397B-A17B-FP8", 8, "bf16")["kv"]
    assert kv.bytes_per_token_per_rank == 15 * 2 * 1 * 256 * 2 == 15_360
    assert kv.replicated


def test_dp_attention_keeps_all_heads_on_each_rank():
    # attention TP 1: 2 x 80 x 8 x 128 x 2 = 327,680 per rank
    kv = pools("llama-3.1-70b", 8, "bf16", dp_attention=True)["kv"]
    assert kv.bytes_per_token_per_rank == 327_680


def test_mla_deepseek_v3_latent_is_replicated():
    # 61 layers x (kv_lora 512 + rope 64) x 2 B = 70,272 on every rank, whatever the TP
    for tp in (1, 8):
        kv = pools("deepseek-ai/DeepSeek-V3", tp, "bf16")["kv"]
        assert kv.bytes_per_token_per_rank == 61 * (512 + 64) * 2 == 70_272
    assert pools("deepseek-ai/DeepSeek-V3", 8, "bf16")["kv"].replicated
    assert pools("deepseek-ai/DeepSeek-V3", 8, "fp8")["kv"].bytes_per_token_per_rank == 35_136


def test_mtp_draft_layer_has_the_target_layer_shape():
    # DeepSeek-V3: 1 NextN layer x 576 x 2 B = 1,152
    assert pools("deepseek-v3", 8, "bf16")["draft_kv"].bytes_per_token_per_rank == 1_152
    # Qwen3.5 TP2: 1 layer x 2 (K,V) x 1 head x 256 x 2 B = 1,024 = 15,360 / 15
    p = pools("qwen3.5", 2, "bf16")
    assert p["draft_kv"].bytes_per_token_per_rank == 1_024
    assert p["kv"].bytes_per_token_per_rank == 15 * 1_024


def test_mla_with_dsa_indexer_glm_5_2():
    p = pools("nvidia/GLM-5.2-NVFP4", 8, "fp8")
    # 78 layers x (512 + 64) x 1 B (fp8) = 44,928
    assert p["kv"].bytes_per_token_per_rank == 78 * 576 == 44_928
    # indexer on the 21 'full' layers: 128 fp8 key + 128 // 128 x 4 B scale = 132 B -> 2,772
    assert p["indexer"].bytes_per_token_per_rank == 21 * (128 + 4) == 2_772
    assert p["indexer"].replicated
    assert p["draft_kv"].bytes_per_token_per_rank == 576


def test_hybrid_gdn_state_is_per_request_not_per_token():
    p = pools("Qwen/Qwen3.5-397B-A17B", 8, "bf16")
    # per GDN layer at TP1: SSM 64 v-heads x 128 x 128 x 4 B = 4,194,304;
    # conv (2 x 16 x 128 + 64 x 128) channels x (4 - 1) x 2 B = 73,728; 45 layers, / 8 ranks
    per_layer_tp1 = 64 * 128 * 128 * 4 + (2 * 16 * 128 + 64 * 128) * 3 * 2
    assert p["mamba"].bytes_per_token_per_rank == 0
    assert p["mamba"].fixed_bytes_per_request_per_rank == 45 * per_layer_tp1 // 8 == 24_007_680
    # = 22.9 MiB, as in reference/kvoffload.md 6.2
    assert round(p["mamba"].fixed_bytes_per_request_per_rank / 2**20, 1) == 22.9


def test_kda_state_kimi_k3():
    p = pools("moonshotai/Kimi-K3", 1, "bf16")
    # 69 KDA layers x (96 heads x 128 x 128 x 4 B + 3 x 96 x 128 channels x 3 x 2 B)
    assert p["mamba"].fixed_bytes_per_request_per_rank == 69 * (
        96 * 128 * 128 * 4 + 3 * 96 * 128 * 3 * 2) == 449_372_160
    # 24 MLA layers x 576 x 2 B
    assert p["kv"].bytes_per_token_per_rank == 24 * 576 * 2 == 27_648


def test_sliding_window_gpt_oss_caps_per_request():
    p = pools("openai/gpt-oss-120b", 1, "bf16")
    # only the 18 full layers grow: 18 x 2 x 8 heads x 64 x 2 B = 36,864
    assert p["kv"].bytes_per_token_per_rank == 36_864
    # the 18 sliding layers hold at most 128 tokens: 18 x 2 x 8 x 64 x 2 x 128 = 4,718,592
    assert p["swa"].fixed_bytes_per_request_per_rank == 36_864 * 128 == 4_718_592
    assert load_model("gpt-oss").kv_bytes_per_token(1) == 36_864


def test_compressed_attention_deepseek_v4():
    p = pools("deepseek-ai/DeepSeek-V4-Pro", 8, "fp8")
    # SGLang's V4 entry is 584 B and a page is padded to a 576-byte multiple:
    # CSA pages hold 256/4 = 64 entries: ceil(64 x 584 / 576) = 65 x 576 / 64 = 585 B each;
    # HCA pages hold 256/128 = 2 entries: ceil(2 x 584 / 576) = 3 x 576 / 2 = 864 B each.
    # 30 x 585 / 4 + 31 x 864 / 128 = 4,387.5 + 209.25 = 4,596.75 -> 4,597 B per token
    assert p["kv"].bytes_per_token_per_rank == 4_597
    # indexer on CSA layers: 30 x 132 B / 4 = 990
    assert p["indexer"].bytes_per_token_per_rank == 990
    # window 128 x 585 B (256-token pages: 260 x 576 / 256) on 61 + 1 MTP layers, per request
    assert p["swa"].fixed_bytes_per_request_per_rank == 62 * 128 * 585 == 4_642_560
    # a bf16 store has no such layout: 512 x 2 B per entry
    b = pools("deepseek-ai/DeepSeek-V4-Pro", 8, "bf16")
    assert b["kv"].bytes_per_token_per_rank == 30 * 1024 // 4 + 31 * 1024 // 128


def test_flops():
    m = load_model("llama-3.1-8b")
    assert m.dense_flops_per_token() == 2 * 8.03e9
    # per (query, key) pair: QK^T + AV = 2 x 32 heads x (128 + 128) per layer x 32 layers
    assert m.attention_flops_per_token_per_context_token() == 32 * 2 * 32 * 256 == 524_288
    # linear layers do not grow with context: Qwen3.5 counts its 15 full layers only
    q = load_model("qwen3.5")
    assert q.attention_flops_per_token_per_context_token() == 15 * 2 * 32 * 2 * 256
    # MLA non-absorbed: 61 x 2 x 128 x ((128 + 64) + 128)
    assert load_model("dsv3").attention_flops_per_token_per_context_token() == \
        61 * 2 * 128 * 320


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_kv_bytes_per_token_sums_token_pools(dtype):
    m = load_model("glm5.2")
    assert m.kv_bytes_per_token(8, kv_dtype=dtype) == sum(
        p.bytes_per_token_per_rank for p in m.kv_pools(8, kv_dtype=dtype))


def test_qwen35_mamba_state_follows_the_engines_ssm_dtype():
    """--mamba-ssm-dtype bfloat16 (every InferenceX Qwen3.5 SGLang launcher) halves the SSM
    part: 45 GDN layers x (64 x 128 x 128 x 2 B + (2x16x128 + 64x128) x 3 x 2 B) / TP2."""
    from kvbench.models import load_model

    m = load_model("Qwen/Qwen3.5-397B-A17B-FP8")
    bf16 = {p.name: p for p in m.kv_pools(2, kv_dtype="fp8", state_dtype="bf16")}
    fp32 = {p.name: p for p in m.kv_pools(2, kv_dtype="fp8")}
    assert bf16["mamba"].fixed_bytes_per_request_per_rank == 48_844_800  # 48.8 MB
    assert fp32["mamba"].fixed_bytes_per_request_per_rank == 96_030_720  # profile default
