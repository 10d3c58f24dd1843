"""One host- or device-side KV pool of a model, in bytes per rank."""

from __future__ import annotations

from dataclasses import dataclass

# Bytes per element of a KV store dtype. fp4 carries one fp8 scale per 16 elements (nvfp4).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp4": 0.5625,
}


@dataclass(frozen=True, slots=True)
class KvPool:
    """A pool the engine allocates per rank.

    `bytes_per_token_per_rank` grows with cached tokens (full-attention KV, MLA latent, indexer
    keys, draft-layer KV). `fixed_bytes_per_request_per_rank` is a per-request slot that does not
    grow with context (linear-attention state, a sliding window's ring). `replicated` means every
    rank of the attention-TP group holds the same bytes, so per-rank capacity is also the unique
    capacity."""

    name: str
    bytes_per_token_per_rank: int
    fixed_bytes_per_request_per_rank: int
    replicated: bool
    note: str
