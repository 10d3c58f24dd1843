"""KV bytes per pool per rank (reference/kvoffload.md section 6.1) and attention FLOPs.

Conventions: `tp` is the attention tensor-parallel degree unless `dp_attention`, in which case
every rank runs attention alone (attention TP 1) and holds its own requests. GQA heads split
over ranks and are replicated when there are fewer KV heads than ranks; an MLA latent, an
indexer key and DeepSeek-V4's shared KV are one head and so sit whole on every rank."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvbench.models.pool import KvPool

if TYPE_CHECKING:
    from kvbench.models.profile import ModelProfile


def _bytes(elements: float, kv_dtype: str) -> int:
    from kvbench.models.profile import dtype_bytes

    return math.ceil(elements * dtype_bytes(kv_dtype))


def _indexer_bytes_per_layer(head_dim: int, quant_block: int) -> int:
    # fp8 keys plus one fp32 scale per quant block (SGLang/vLLM DSA indexer layout): 128 -> 132.
    return head_dim + head_dim // quant_block * 4


def gqa_heads_per_rank(num_kv_heads: int, attn_tp: int) -> int:
    return max(1, math.ceil(num_kv_heads / attn_tp))


def _per_layer_bytes(m: ModelProfile, attn_tp: int, kv_dtype: str) -> tuple[int, bool, str]:
    """Bytes per token of one full-attention layer on one rank, replicated?, formula."""
    if m.mla is not None:
        dim = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim
        return _bytes(dim, kv_dtype), attn_tp > 1, f"(kv_lora {m.mla.kv_lora_rank} + rope " \
            f"{m.mla.qk_rope_head_dim}) x {kv_dtype}"
    heads = gqa_heads_per_rank(m.num_kv_heads, attn_tp)
    replicated = m.num_kv_heads < attn_tp
    return (
        _bytes(2 * heads * m.head_dim, kv_dtype),
        replicated,
        f"2 (K,V) x {heads} kv heads/rank x head_dim {m.head_dim} x {kv_dtype}",
    )


def kv_pools(m: ModelProfile, *, tp: int, dp_attention: bool, kv_dtype: str,
             state_dtype: str | None = None) -> list[KvPool]:
    attn_tp = 1 if dp_attention else tp
    if m.compressed is not None:
        return _compressed_pools(m, attn_tp, kv_dtype)
    layer_bytes, replicated, formula = _per_layer_bytes(m, attn_tp, kv_dtype)
    rep_note = " (replicated on every attention-TP rank)" if replicated else ""
    pools = [
        KvPool(
            "kv",
            m.full_layers * layer_bytes,
            0,
            replicated,
            f"{m.full_layers} full-attention layers x {formula}{rep_note}",
        )
    ]
    if m.indexer is not None:
        per = _indexer_bytes_per_layer(m.indexer.head_dim, m.indexer.quant_block)
        pools.append(
            KvPool(
                "indexer",
                m.indexer.num_layers * per,
                0,
                attn_tp > 1,
                f"{m.indexer.num_layers} indexer layers x {per} B (fp8 key {m.indexer.head_dim} "
                f"+ fp32 scale per {m.indexer.quant_block})",
            )
        )
    if m.sliding_layers:
        heads = gqa_heads_per_rank(m.num_kv_heads, attn_tp)
        per_token = m.sliding_layers * _bytes(2 * heads * m.head_dim, kv_dtype)
        pools.append(
            KvPool(
                "swa",
                0,
                per_token * m.sliding_window,
                m.num_kv_heads < attn_tp,
                f"{m.sliding_layers} sliding layers x window {m.sliding_window} tokens x "
                f"{per_token // m.sliding_layers} B",
            )
        )
    if m.linear_layers and m.linear is not None:
        pools.append(_linear_pool(m, attn_tp, state_dtype or m.linear.state_dtype))
    if m.mtp_layers:
        pools.append(
            KvPool(
                "draft_kv",
                m.mtp_layers * layer_bytes,
                0,
                replicated,
                f"{m.mtp_layers} MTP/NEXTN draft layer(s) x {layer_bytes} B (same shape as a "
                "target full-attention layer)",
            )
        )
    return pools


def full_layer_bytes_per_token(m: ModelProfile, attn_tp: int, kv_dtype: str) -> int:
    """Bytes per token of one full-attention layer on one rank."""
    return _per_layer_bytes(m, attn_tp, kv_dtype)[0]


def linear_state_bytes_per_layer(m: ModelProfile, attn_tp: int,
                                 state_dtype: str | None = None, spec_tokens: int = 0) -> int:
    """One request's recurrent state of one linear-attention layer on one rank.
    `spec_tokens`: vLLM keeps one more conv row per speculative token (vllm 0.26
    model_executor/layers/mamba/mamba_utils.py:223-227, conv_kernel - 1 + num_spec)."""
    from kvbench.models.profile import dtype_bytes

    s = m.linear
    assert s is not None
    state_dtype = state_dtype or s.state_dtype
    if s.kind == "kda":  # q, k, v share num_value_heads x head_dim channels
        v_heads = k_heads = s.num_value_heads
    else:
        v_heads, k_heads = s.num_value_heads, s.num_key_heads
    temporal = v_heads * s.key_head_dim * s.value_head_dim * dtype_bytes(state_dtype)
    conv_channels = 2 * k_heads * s.key_head_dim + v_heads * s.value_head_dim
    conv = conv_channels * (s.conv_kernel - 1 + spec_tokens) * dtype_bytes(s.conv_dtype)
    return math.ceil((temporal + conv) / attn_tp)


def _linear_pool(m: ModelProfile, attn_tp: int, state_dtype: str) -> KvPool:
    per_layer = linear_state_bytes_per_layer(m, attn_tp, state_dtype)
    s = m.linear
    assert s is not None
    return KvPool(
        "mamba",
        0,
        m.linear_layers * per_layer,
        False,
        f"{m.linear_layers} {s.kind} layers x {per_layer} B state per request per rank "
        f"({state_dtype} SSM {s.num_value_heads}x{s.key_head_dim}x{s.value_head_dim} + "
        f"{s.conv_dtype} conv, split over {attn_tp} rank(s))",
    )


def _entry_bytes(m: ModelProfile, kv_dtype: str, entries_per_page: int) -> float:
    """Bytes of one shared K=V entry in a pool page of `entries_per_page` entries: the
    engine's padded layout for an fp8 store (584 B, pages rounded up to 576-byte multiples),
    else head_dim x dtype."""
    c = m.compressed
    assert c is not None
    if c.entry_bytes is None or c.page_align_bytes is None or kv_dtype not in (
            "fp8", "fp8_e4m3"):
        return float(_bytes(m.head_dim, kv_dtype))
    page = math.ceil(entries_per_page * c.entry_bytes / c.page_align_bytes) * c.page_align_bytes
    return page / entries_per_page


def _compressed_pools(m: ModelProfile, attn_tp: int, kv_dtype: str) -> list[KvPool]:
    c = m.compressed
    assert c is not None
    csa = _entry_bytes(m, kv_dtype, max(1, c.page_tokens // c.csa_rate))
    hca = _entry_bytes(m, kv_dtype, max(1, c.page_tokens // c.hca_rate))
    entry = _entry_bytes(m, kv_dtype, c.page_tokens)  # the sliding window's pages
    per_token = math.ceil(c.csa_layers * csa / c.csa_rate + c.hca_layers * hca / c.hca_rate)
    pools = [
        KvPool(
            "kv",
            per_token,
            0,
            attn_tp > 1,
            f"{c.csa_layers} CSA layers x {csa:g} B / {c.csa_rate} + {c.hca_layers} HCA layers "
            f"x {hca:g} B / {c.hca_rate} (compressed entries incl. page padding, amortised per "
            "token)",
        )
    ]
    if m.indexer is not None:
        per = _indexer_bytes_per_layer(m.indexer.head_dim, m.indexer.quant_block)
        pools.append(
            KvPool(
                "indexer",
                math.ceil(m.indexer.num_layers * per / c.csa_rate),
                0,
                attn_tp > 1,
                f"{m.indexer.num_layers} CSA indexer layers x {per} B / {c.csa_rate}",
            )
        )
    window = m.sliding_window or 0
    layers = m.num_layers + m.mtp_layers
    pools.append(
        KvPool(
            "swa",
            0,
            math.ceil(layers * window * entry),
            attn_tp > 1,
            f"{layers} layers (incl. {m.mtp_layers} MTP) x sliding window {window} x {entry:g} B",
        )
    )
    return pools


def attention_flops_per_context_token(m: ModelProfile) -> float:
    """FLOPs one new token spends on one earlier token, summed over layers.

    QK^T and AV cost 2*H_q*(d_qk + d_v) per (query, key) pair on a full-attention layer (MLA
    counted non-absorbed, as in prefill). Linear-attention layers and sliding windows do not grow
    with context (0 here); sparse layers attend a bounded top-k, so only their indexer scoring
    grows with context."""
    if m.compressed is not None:
        c = m.compressed
        hca = c.hca_layers * 2 * m.num_attention_heads * 2 * m.head_dim / c.hca_rate
        idx = 0.0
        if m.indexer is not None:
            idx = c.csa_layers * 2 * m.indexer.num_heads * m.indexer.head_dim / c.csa_rate
        return hca + idx
    if m.indexer is not None:
        return float(m.indexer.num_layers * 2 * m.indexer.num_heads * m.indexer.head_dim)
    if m.mla is not None:
        d_qk = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim
        return float(m.full_layers * 2 * m.num_attention_heads * (d_qk + m.mla.v_head_dim))
    return float(m.full_layers * 2 * m.num_attention_heads * 2 * m.head_dim)
