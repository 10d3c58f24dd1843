"""Build a `ModelProfile` from a local HF `config.json` (any of the shipped architectures).

Shapes come straight from the file; parameter counts are estimated from the shapes (marked so
in `estimated`) because config.json does not state them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvbench.errors import ModelError, validation_message
from kvbench.files import read_bounded
from kvbench.models.profile import ModelProfile


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def _gdn_params(c: dict[str, Any]) -> int:
    """One Gated DeltaNet layer's projections (sglang 0.5.17 models/qwen3_5.py
    Qwen3_5GatedDeltaNet: in_proj_qkvz, in_proj_ba, conv1d, out_proj)."""
    h = c["hidden_size"]
    key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    value_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    conv = (2 * key_dim + value_dim) * c.get("linear_conv_kernel_dim", 4)
    return h * (2 * key_dim + 2 * value_dim) + h * 2 * c["linear_num_value_heads"] + conv \
        + value_dim * h


def _mla_params(c: dict[str, Any]) -> int:
    """One MLA layer's projections (DeepSeek-V2/V3; sglang 0.5.17 models/deepseek_v2.py
    DeepseekV2AttentionMLA): the query through its low-rank `q_lora_rank` (or directly), the
    joint KV latent plus the rope key, its up-projection to per-head nope keys and values,
    and the output."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    q_lora = c.get("q_lora_rank")
    q = h * q_lora + q_lora * heads * qk if q_lora else h * heads * qk
    kv = h * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) + \
        c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
    return q + kv + heads * c["v_head_dim"] * h


def _params(c: dict[str, Any], layers: int, q_dim: int, kv_dim: int,
            linear_layers: int = 0, mtp_layers: int = 0) -> tuple[int, int]:
    """(total, active) parameters estimated from matrix shapes; linear-attention layers
    count their own projections, MTP draft layers one attention layer, one MoE block and
    the 2h -> h fusion each."""
    h = c["hidden_size"]
    embed = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings") else 2)
    # q (doubled by an output gate: Qwen3-Next/3.5 attn_output_gate, sglang 0.5.17
    # models/qwen3_5.py), k and v (kv_dim is both), o
    gate = 2 if c.get("attn_output_gate") else 1
    per_attn = _mla_params(c) if c.get("kv_lora_rank") else \
        h * q_dim * gate + h * kv_dim + q_dim * h
    attn = (layers - linear_layers) * per_attn + linear_layers * (
        _gdn_params(c) if linear_layers else 0) + mtp_layers * (per_attn + 2 * h * h)
    blocks = layers + mtp_layers
    experts = c.get("num_experts") or c.get("n_routed_experts") or c.get("num_local_experts") or 0
    top_k = c.get("num_experts_per_tok") or c.get("num_experts_per_token") or 0
    if experts:
        moe_inter = c.get("moe_intermediate_size") or c.get("intermediate_size")
        shared = (c.get("n_shared_experts") or c.get("num_shared_experts") or 0) * moe_inter
        shared = c.get("shared_expert_intermediate_size") or shared
        per_expert = 3 * h * moe_inter
        router = experts * h + (h if shared else 0)  # the gate, the shared expert's gate
        # DeepSeek: the first `first_k_dense_replace` layers have a dense MLP instead
        dense = min(c.get("first_k_dense_replace") or 0, layers)
        dense_mlp = dense * 3 * h * c.get("intermediate_size", 0)
        blocks -= dense
        total = embed + attn + dense_mlp + blocks * (experts * per_expert + 3 * h * shared
                                                     + router)
        active = embed + attn + dense_mlp + blocks * (top_k * per_expert + 3 * h * shared
                                                      + router)
        return int(total), int(active)
    dense = embed + attn + blocks * 3 * h * c["intermediate_size"]
    return int(dense), int(dense)


def _vision_params(c: dict[str, Any]) -> int:
    """A Qwen3-VL-style vision tower's parameters (`vision_config`: patch embedding, learned
    positions, `depth` pre-norm blocks of fused qkv, projection and a two-layer MLP, all with
    biases, and the patch merger to the text width; sglang 0.5.17 models/qwen3_vl.py
    Qwen3VLMoeVisionModel). SGLang loads it on every start of a multimodal architecture; the
    scaled Qwen3.5's target logged 30.64 GB, its text weights and this tower."""
    v = c.get("vision_config")
    if not isinstance(v, dict) or not {"depth", "hidden_size", "intermediate_size"} <= set(v):
        return 0
    d, i = v["hidden_size"], v["intermediate_size"]
    patch = v.get("in_channels", 3) * v.get("temporal_patch_size", 2) * \
        v.get("patch_size", 16) ** 2 * d + d
    positions = v.get("num_position_embeddings", 0) * d
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d)
    merged = d * v.get("spatial_merge_size", 2) ** 2
    out = v.get("out_hidden_size", c.get("hidden_size", d))
    merger = 2 * d + (merged * merged + merged) + (merged * out + out)
    return patch + positions + v["depth"] * block + merger


def profile_from_config(path: Path, name: str | None = None) -> ModelProfile:
    # a real config.json is a few KB; a device or FIFO named as one ends at once
    text = read_bounded(path, 16 << 20, "config.json", ModelError)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ModelError(f"{path}: cannot read a config.json: {e}") from None
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: cannot read a config.json: a JSON {type(raw).__name__}, "
                         "not an object")
    c = _text(raw)
    try:
        return _build(c, path, name)
    except KeyError as e:
        raise ModelError(
            f"{path}: config.json lacks field {e.args[0]!r} needed for the KV profile",
            hint="add a profile YAML under kvbench/models/data instead",
        ) from None
    except ValidationError as e:
        raise ModelError(validation_message(e, f"{path}: cannot build a profile")) from None


def _build(c: dict[str, Any], path: Path, name: str | None = None) -> ModelProfile:
    layers = c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    # MLA's query/key head is nope + rope wide (DeepSeek's config.json has no head_dim)
    mla_head = (c.get("qk_nope_head_dim") or 0) + (c.get("qk_rope_head_dim") or 0)
    head_dim = c.get("head_dim") or mla_head or c["hidden_size"] // heads
    fields: dict[str, Any] = {
        "name": name or c.get("_name_or_path") or path.parent.name,
        "model_type": c.get("model_type", "unknown"),
        "hf_ids": [],
        "num_layers": layers,
        "hidden_size": c["hidden_size"],
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": c["vocab_size"],
        "full_layers": layers,
        "mtp_layers": c.get("num_nextn_predict_layers") or c.get("mtp_num_hidden_layers") or 0,
    }
    layer_types = c.get("layer_types") or []
    if "kv_lora_rank" in c and c.get("kv_lora_rank"):
        fields["mla"] = {k: c[k] for k in
                         ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
        if c.get("index_head_dim"):
            owning = c.get("indexer_types")
            fields["indexer"] = {
                "head_dim": c["index_head_dim"],
                "num_heads": c.get("index_n_heads", 64),
                "num_layers": sum(t == "full" for t in owning) if owning else layers,
                "topk": c.get("index_topk", 2048),
            }
    lin = c.get("linear_attn_config")
    if isinstance(lin, dict):  # Kimi Linear / K3: KDA layers plus MLA layers
        fields["linear_layers"] = len(lin.get("kda_layers", []))
        fields["full_layers"] = layers - fields["linear_layers"]
        fields["linear"] = {
            "kind": "kda", "num_key_heads": lin["num_heads"], "num_value_heads": lin["num_heads"],
            "key_head_dim": lin["head_dim"], "value_head_dim": lin["head_dim"],
            "conv_kernel": lin.get("short_conv_kernel_size", 4),
        }
    elif "linear_num_value_heads" in c:  # Qwen3-Next / Qwen3.5 Gated DeltaNet
        interval = c.get("full_attention_interval", 4)
        full = sum(t == "full_attention" for t in layer_types) or layers // interval
        fields["full_layers"], fields["linear_layers"] = full, layers - full
        fields["linear"] = {
            "kind": "gdn", "num_key_heads": c["linear_num_key_heads"],
            "num_value_heads": c["linear_num_value_heads"],
            "key_head_dim": c["linear_key_head_dim"],
            "value_head_dim": c["linear_value_head_dim"],
            "conv_kernel": c.get("linear_conv_kernel_dim", 4),
        }
    elif "sliding_attention" in layer_types and c.get("sliding_window"):
        sliding = sum(t == "sliding_attention" for t in layer_types)
        fields["sliding_layers"], fields["full_layers"] = sliding, layers - sliding
        fields["sliding_window"] = c["sliding_window"]
    experts = c.get("num_experts") or c.get("n_routed_experts") or c.get("num_local_experts")
    top_k = c.get("num_experts_per_tok") or c.get("num_experts_per_token")
    if experts and top_k:
        fields["num_experts"], fields["experts_per_token"] = experts, top_k
    if isinstance(c.get("max_position_embeddings"), int):
        fields["native_context_tokens"] = c["max_position_embeddings"]
    q_dim = heads * head_dim
    kv_dim = 2 * kv_heads * head_dim
    linear = fields.get("linear_layers", 0) if "linear_num_value_heads" in c else 0
    total, active = _params(c, layers, q_dim, kv_dim, linear, fields["mtp_layers"])
    fields["total_params"], fields["active_params"] = total, active
    if vision := _vision_params(c):
        fields["vision_params"] = vision
    src = f"local config.json {path}"
    descriptive = {"name", "model_type", "hf_ids"}
    fields["sources"] = {k: src for k in fields if k not in descriptive}
    fields["estimated"] = {
        "total_params": "estimated from matrix shapes in config.json",
        "active_params": "estimated from matrix shapes in config.json (top-k experts)",
        **({"vision_params": "estimated from vision_config's shapes"}
           if "vision_params" in fields else {}),
    }
    return ModelProfile.model_validate(fields)
