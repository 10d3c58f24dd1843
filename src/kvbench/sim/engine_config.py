"""What the continuous-batching engine is configured with: its admission limits, whether
decode fast-forwards, and which KV manager (SGLang radix or vLLM blocks) it runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_running_requests: int = 256
    chunked_prefill_tokens: int = 8192  # prefill token budget per step
    fast_forward: bool = True  # False: one decode step per event (streaming servers)
    # KV manager: `radix` (SGLang's radix tree over TieredCache) or `vllm_blocks` (vLLM's
    # block pool and scheduler, sim/vllm.py), with its block size in tokens.
    kv_manager: str = "radix"
    block_tokens: int = 16
    # The served context (max_model_len): longer prompt + output is refused (sim/context.py).
    context_tokens: int | None = None
    # vllm_blocks with a CPU tier: SimpleCPUOffloadConnector's lazy_offload (store the blocks
    # next to be evicted) instead of storing each block when computed (sim/blocks.py)
    lazy_offload: bool = False
    # SGLang's --scheduler-recv-interval: the scheduler takes in new requests only when a
    # counter reaches this; each decode step adds 1, a prefill 1000 (at once), an idle loop
    # 1 (at once in engine time). 1: every step boundary (the default)
    recv_interval_steps: int = 1
