"""`ModelProfile`: the memory-relevant fields of a checkpoint's config.json, with their sources.

Profiles are data (`data/*.yaml`, one file per model). Every number has an entry in `sources`;
numbers that could not be confirmed from a published config are listed in `estimated` with how
they were estimated. Everything else (KV bytes per pool, FLOPs) is derived, never stored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench.errors import ModelError
from kvbench.models.pool import DTYPE_BYTES, KvPool

# Bytes per parameter of a checkpoint precision (block scales included: fp8 one fp32 scale per
# 128x128 block is negligible; nvfp4/mxfp4 one 8-bit scale per 16/32 elements).
PARAM_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5625}

_FROZEN = ConfigDict(extra="forbid", frozen=True)
# Fields that are names and bookkeeping rather than numbers needing a source.
_DESCRIPTIVE = {"name", "model_type", "hf_ids", "aliases", "sources", "estimated", "notes"}


class MlaSpec(BaseModel):
    """Multi-head latent attention: one latent (kv_lora_rank + qk_rope_head_dim) per token/layer."""

    model_config = _FROZEN
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


class IndexerSpec(BaseModel):
    """Sparse-attention lightning indexer: one key of head_dim per token on each owning layer."""

    model_config = _FROZEN
    head_dim: int
    num_heads: int
    num_layers: int = Field(description="layers that run (and cache keys for) their own indexer")
    topk: int
    quant_block: int = 128


class LinearSpec(BaseModel):
    """Linear attention (Gated DeltaNet, Kimi Delta Attention): a fixed state per request."""

    model_config = _FROZEN
    kind: Literal["gdn", "kda"]
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    state_dtype: str = "fp32"
    conv_dtype: str = "bf16"


class CompressedSpec(BaseModel):
    """DeepSeek-V4 attention: a sliding window on every layer plus compressed long-range entries."""

    model_config = _FROZEN
    csa_layers: int
    csa_rate: int
    hca_layers: int
    hca_rate: int
    # The engine's fp8 entry layout: bytes per entry and the page alignment of a pool page
    # (SGLang DeepSeekV4 KV pool: 584 B per entry, pages padded to 576-byte multiples).
    # `page_tokens` is the logical page; a ratio-r pool holds page_tokens / r entries a page.
    entry_bytes: int | None = None
    page_align_bytes: int | None = None
    page_tokens: int = 256


class ModelProfile(BaseModel):
    model_config = _FROZEN

    name: str
    model_type: str
    hf_ids: list[str]
    aliases: list[str] = Field(default_factory=list)
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    total_params: int
    active_params: int
    # Layer schedule: how many layers of each attention kind (they sum to num_layers).
    full_layers: int = Field(description="layers caching every token (GQA/MHA or MLA)")
    sliding_layers: int = 0
    sliding_window: int | None = None
    linear_layers: int = 0
    mla: MlaSpec | None = None
    indexer: IndexerSpec | None = None
    linear: LinearSpec | None = None
    compressed: CompressedSpec | None = None
    mtp_layers: int = Field(0, description="MTP/NEXTN draft layers shipped with the checkpoint")
    vision_params: int = Field(0, ge=0, description="a multimodal checkpoint's vision tower, "
                               "not in total_params (text decode never reads it); engines "
                               "load it on every start")
    # Mixture of experts (0 = dense): routed experts per MoE layer and how many each token
    # picks; the simulator reads only the experts a decode batch touches.
    num_experts: int = Field(0, ge=0, description="routed experts per MoE layer")
    experts_per_token: int = Field(0, ge=0, description="routed experts each token picks")
    kv_dtype: dict[str, str] = Field(
        default_factory=lambda: {"default": "bf16"},
        description="KV store dtype engines pick by checkpoint precision ('default' otherwise)",
    )
    checkpoint_bytes: dict[str, int] = Field(
        default_factory=dict, description="measured checkpoint size by precision, if published"
    )
    native_context_tokens: int | None = Field(
        None, gt=0, description="the checkpoint's own context limit (config.json "
        "max_position_embeddings): the only value an agentic launch may set as its context")
    sources: dict[str, str]
    estimated: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> ModelProfile:
        counted = self.full_layers + self.sliding_layers + self.linear_layers
        if self.compressed is not None:
            counted = self.compressed.csa_layers + self.compressed.hca_layers
        if counted != self.num_layers:
            raise ValueError(
                f"layer schedule sums to {counted} but num_layers is {self.num_layers} "
                "(full_layers + sliding_layers + linear_layers, or csa + hca for compressed)"
            )
        if self.sliding_layers and not self.sliding_window:
            raise ValueError("sliding_layers > 0 requires sliding_window")
        if self.linear_layers and self.linear is None:
            raise ValueError("linear_layers > 0 requires a linear: block")
        given = self.model_fields_set - _DESCRIPTIVE
        missing = sorted(n for n in given if n not in self.sources and n not in self.estimated)
        if missing:
            raise ValueError(f"fields without a source (add to sources:): {', '.join(missing)}")
        return self

    # -- derived -------------------------------------------------------------------------
    def routed_expert_params(self) -> int:
        """Parameters of all routed experts: (total - active) is (E - k) experts' worth, so
        one expert is (total - active) / (E - k); 0 for a dense model."""
        e, k = self.num_experts, self.experts_per_token
        if not e or not 0 < k < e:
            return 0
        return int((self.total_params - self.active_params) * e / (e - k))

    @property
    def attention_kind(self) -> str:
        if self.compressed is not None:
            return "compressed"
        if self.mla is not None:
            return "dsa" if self.indexer is not None else "mla"
        return "gqa"

    @property
    def is_hybrid(self) -> bool:
        return bool(self.linear_layers or self.sliding_layers)

    def kv_dtype_for(self, precision: str) -> str:
        return self.kv_dtype.get(precision, self.kv_dtype.get("default", "bf16"))

    def weight_bytes(self, precision: str) -> int:
        """Whole-model weight bytes for a checkpoint precision (published size when known)."""
        if precision in self.checkpoint_bytes:
            return self.checkpoint_bytes[precision]
        if precision not in PARAM_BYTES:
            raise ModelError(
                f"unknown precision {precision!r} for {self.name}; "
                f"known: {', '.join(sorted(PARAM_BYTES))}"
            )
        return int(self.total_params * PARAM_BYTES[precision])

    def kv_pools(
        self, tp: int, dp_attention: bool = False, kv_dtype: str = "bf16",
        state_dtype: str | None = None,
    ) -> list[KvPool]:
        """`state_dtype`: the engine's linear-attention SSM state dtype when the launch sets
        one (SGLang --mamba-ssm-dtype); the profile's otherwise."""
        from kvbench.models.kv import kv_pools

        return kv_pools(self, tp=tp, dp_attention=dp_attention, kv_dtype=kv_dtype,
                        state_dtype=state_dtype)

    def kv_bytes_per_token(
        self, tp: int, dp_attention: bool = False, kv_dtype: str = "bf16"
    ) -> int:
        """Sum of the per-token pools of one rank (draft-layer KV included)."""
        return sum(p.bytes_per_token_per_rank for p in self.kv_pools(tp, dp_attention, kv_dtype))

    def dense_flops_per_token(self) -> float:
        return 2.0 * self.active_params

    def attention_flops_per_token_per_context_token(self) -> float:
        from kvbench.models.kv import attention_flops_per_context_token

        return attention_flops_per_context_token(self)


def dtype_bytes(kv_dtype: str) -> float:
    try:
        return DTYPE_BYTES[kv_dtype]
    except KeyError:
        raise ModelError(
            f"unknown KV dtype {kv_dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}"
        ) from None
