"""vLLM's KV cache layout: the block size it runs, the bytes of a block, the tensors it allocates
and the capacity it reports, for full-attention models and for hybrids of full attention and
Gated DeltaNet (Qwen3-Next, Qwen3.5) under the hybrid KV cache manager.

What vLLM 0.26 does (file:line in the vllm-0.26.0 wheel):
- A hybrid model's attention block is raised until one attention page holds one GDN state:
  block = a x ceil(state / (a x attention bytes per token)), a = max(the backend's kernel block,
  the --block-size given), FLASH_ATTN's kernel block a multiple of 16
  (platforms/interface.py:765-892 `_align_hybrid_block_size`, v1/attention/backends/
  flash_attn.py:80-81); the state page is padded up to the attention page. The state holds one
  conv row more per speculative token (layers/mamba/mamba_utils.py:213-234). Prefix caching
  (kvbench's vLLM adapter always enables it) runs Qwen3.5's states in mamba cache mode "align"
  (model_executor/models/config.py:558-580), which keeps the block above.
- Layers of one kind form groups of `group_size` layers, the smallest kind's count, or the
  largest's where it is under 1.5x the smallest (v1/core/kv_cache_utils.py:1137-1257); the MTP
  draft's attention layers count with the target's. Every group shares `group_size` KV tensors of
  `page x num_blocks` bytes, so one block costs `page x group_size` and num_blocks =
  memory // page // group_size (kv_cache_utils.py:1396-1420, 990-1007).
- "GPU KV cache size: N tokens" is max concurrency x max_model_len, max concurrency = num_blocks
  / blocks one max_model_len request needs: ceil(max_model_len / block) per attention group and
  2 + spec tokens per GDN group in "align" mode (kv_cache_utils.py:937-955, 1819-1829, 2166-2177;
  v1/kv_cache_interface.py:709-718).
- CPU offload sizes by that block: the native OffloadingConnector gets cpu_bytes //
  (page x group_size) blocks and pins one tensor of blocks x page per KV tensor
  (v1/kv_offload/cpu/spec.py:88-105, gpu_worker.py:486-501); the SimpleCPUOffloadConnector the
  same count (v1/simple_kv_offload/manager.py:180-215).
Checked against those functions run on CPU: tests/data/vllm-0.26/ (tests/data/README.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbench.models import ModelProfile
from kvbench.models.kv import full_layer_bytes_per_token, linear_state_bytes_per_layer

FLASH_ATTN_KERNEL_BLOCK = 16  # v1/attention/backends/flash_attn.py:80-81: MultipleOf(16)
# The MTP rows' --speculative-config num_speculative_tokens (engines/data/vllm.yaml "speculative
# decoding (MTP)", dsv4_fp4_b200_vllm_mtp.sh:256 at InferenceX 843c6254f)
VLLM_MTP_SPEC_TOKENS = 3
ALIGN_STATE_BLOCKS = 2  # mamba cache mode "align": 2 + spec tokens state blocks per request


@dataclass(frozen=True, slots=True)
class VllmKvLayout:
    block_tokens: int
    block_flag_tokens: int
    page_bytes: int  # one layer's block; a GDN state padded to it
    attention_bytes_per_token: int  # one layer
    state_bytes: int  # one GDN layer's state, unpadded (0: no GDN layer)
    attention_layers: int
    state_layers: int
    group_size: int
    spec_tokens: int

    @property
    def groups(self) -> tuple[int, int]:
        """(attention groups, GDN groups)."""
        return (math.ceil(self.attention_layers / self.group_size),
                math.ceil(self.state_layers / self.group_size) if self.state_layers else 0)

    @property
    def tensors(self) -> int:
        return self.group_size

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.group_size

    def num_blocks(self, memory_bytes: int) -> int:
        return max(0, memory_bytes // self.page_bytes // self.group_size)

    def blocks_per_request(self, max_model_len: int) -> int:
        attention, states = self.groups
        return (attention * math.ceil(max_model_len / self.block_tokens)
                + states * (ALIGN_STATE_BLOCKS + self.spec_tokens))

    def capacity_tokens(self, num_blocks: int, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size: N tokens" for `num_blocks`."""
        return int(num_blocks / self.blocks_per_request(max_model_len) * max_model_len)

    def describe(self, memory_bytes: int, max_model_len: int, what: str) -> str:
        blocks = self.num_blocks(memory_bytes)
        attention, states = self.groups
        head = f"vLLM layout: block {self.block_tokens:,} tokens"
        if self.state_layers:
            head += (f" (raised from {self.block_flag_tokens} so one attention page, "
                     f"{self.attention_bytes_per_token:,} B/token, holds a GDN state of "
                     f"{self.state_bytes:,} B)")
        return (f"{head}; {attention + states} group(s) of {self.group_size} layer(s) "
                f"({self.attention_layers} attention, {self.state_layers} GDN), "
                f"{self.tensors} KV tensors; {what} {memory_bytes:,} B / "
                f"{self.block_bytes:,} B per block = {blocks:,} blocks; GPU KV cache size "
                f"{self.capacity_tokens(blocks, max_model_len):,} tokens ({blocks:,} / "
                f"{self.blocks_per_request(max_model_len)} blocks per {max_model_len:,}-token "
                "request)")


def vllm_kv_layout(model: ModelProfile, *, kv_dtype: str, attn_tp: int, block_flag: int,
                   mtp: bool, state_dtype: str | None = None) -> VllmKvLayout | None:
    """The layout of a GQA model with full attention and optionally GDN layers; None for the
    layouts not modelled here (MLA, an indexer cache, sliding windows, compressed, KDA)."""
    if (model.mla is not None or model.compressed is not None or model.sliding_layers
            or model.indexer is not None
            or (model.linear is not None and model.linear.kind != "gdn")):
        return None
    spec = VLLM_MTP_SPEC_TOKENS if mtp and model.mtp_layers else 0
    per_token = full_layer_bytes_per_token(model, attn_tp, kv_dtype)
    attention = model.full_layers + (model.mtp_layers if spec else 0)
    block, state = block_flag, 0
    if model.linear_layers and model.linear is not None:
        state = linear_state_bytes_per_layer(model, attn_tp, state_dtype, spec_tokens=spec)
        align = max(FLASH_ATTN_KERNEL_BLOCK, block_flag)
        block = max(block_flag, align * math.ceil(state / (align * per_token)))
    counts = [n for n in (attention, model.linear_layers) if n]
    small, large = min(counts), max(counts)
    group_size = large if large < small * 1.5 else small
    return VllmKvLayout(block_tokens=block, block_flag_tokens=block_flag,
                        page_bytes=block * per_token, attention_bytes_per_token=per_token,
                        state_bytes=state, attention_layers=attention,
                        state_layers=model.linear_layers, group_size=group_size,
                        spec_tokens=spec)
