"""The cost model: how long a forward pass and a KV transfer take, from a few plain numbers.

Prefill is compute-bound (FLOPs at the effective FLOP/s), decode is memory-bound (bytes read at
the effective HBM bandwidth); a step takes the larger of the two (a roofline) plus the
engine's host overhead (fixed, per prefill step, per sequence). Attention is costed per
request or over the packed batch (engine_profile.ATTENTION_MODES). Host<->device copies run
at the effective link bandwidth (kvoffload.md section 8)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import starmap
from typing import Any

from kvbench.errors import SimError

# `per_request`: each request attends to its own context (paged FlashAttention/FlashInfer:
# SGLang, vLLM); causal prefill costs the triangle. `packed_dense`: one attention call over
# the packed batch with a dense [queries, keys] mask (transformers' continuous batching
# without flash-attn): every query token of the step is scored against every key the step
# reads, masked pairs included.
ATTENTION_MODES = ("per_request", "packed_dense")


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-rank numbers; every rank of a TP group does the same work at the same time."""

    weight_bytes_per_rank: float
    kv_bytes_per_token_per_rank: float
    flops_per_token_per_rank: float
    attention_flops_per_token_per_context_token_per_rank: float
    flops_per_s: float  # effective (peak x achievable fraction)
    hbm_bytes_per_s: float  # effective
    h2d_bytes_per_s: float  # effective host -> device
    d2h_bytes_per_s: float  # effective device -> host
    # Scheduler, kernel launch and all-reduce cost of one forward pass.
    step_overhead_s: float = 1e-3
    # Fixed cost of one load-back (scheduling, TP consensus); kvoffload.md 8.3 says 0.1-few ms.
    load_fixed_s: float = 1e-4
    # Speculative decoding: tokens accepted per step (1 = off) and tokens verified per step.
    accept_length: float = 1.0
    verify_tokens: int = 1
    # Draft-model cost as a fraction of a target decode step.
    draft_overhead_fraction: float = 0.0
    # Fixed per-request state (linear-attention/Mamba state, sliding-window KV), in tokens of
    # the per-token pool: vLLM's block pool holds it (vllm_blocks reserves it per running
    # request); SGLang keeps it in pools of its own, so the radix engine does not.
    request_state_tokens: int = 0
    # Hybrid models under SGLang: a prefix hit ends at a saved recurrent state, saved at
    # prefill chunk ends aligned to max(this, page) tokens (sim/checkpoints.py); 0: none
    state_checkpoint_tokens: int = 0
    label: str = "custom"
    # Engine behaviour (engine_profile.EngineProfile): extra fixed cost of a step that
    # prefills, host cost per sequence in a step, and the attention costing mode.
    prefill_overhead_s: float = 0.0
    per_sequence_overhead_s: float = 0.0
    attention: str = "per_request"
    engine: str = "sglang"
    # Mixture of experts: the routed experts' share of weight_bytes_per_rank, the routed
    # experts per layer and the experts each token picks. A step reads the shared weights
    # (attention, shared experts, embeddings) and only the experts its tokens touch.
    expert_bytes_per_rank: float = 0.0
    num_experts: int = 0
    experts_per_token: int = 0
    # vLLM scheduler behaviour (engine_profile: admit_full_prompt, load_ready_steps), used by
    # the vllm_blocks manager (sim/vllm.py): admission needs room for the whole prompt; a host
    # hit waits for its load (-1: the load overlaps the first chunk's step instead).
    admit_full_prompt: bool = False
    load_ready_steps: int = -1
    # ... and the host work of resuming such a request after its load, overlapping the step
    # before (what outlasts it stalls the step that resumes the request)
    load_stall_s: float = 0.0
    # SGLang HiCache (engine_profile: load_back_min_tokens): a host hit shorter than this is
    # recomputed instead of loaded back (radix KV manager, cache.py)
    load_back_min_tokens: int = 0
    # Host time per prompt token before the engine sees the request (the API server's
    # tokenization): it delays the request's arrival at the scheduler, cached or not.
    prompt_token_overhead_s: float = 0.0
    # Fraction of the HBM rate at which the decode attention kernel reads a sequence's KV (a
    # split-KV triton kernel reads it far below the rate the weights stream at).
    decode_kv_read_efficiency: float = 1.0
    # Up to this batch size the kernel's KV read rate grows with the batch (its grid fills
    # more of the GPU's SMs), from decode_kv_read_efficiency at one sequence.
    decode_kv_parallel_batch: float = 1.0
    # `decode_lines` per batch size, filled as the engine asks (not a parameter: `replace`
    # gives the new model an empty one)
    _lines: dict[int, tuple[float, float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # `weight_bytes_read` per step size in tokens, likewise (a power per step otherwise)
    _weights: dict[float, float] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_MODES:
            raise SimError(f"cost model attention must be one of {', '.join(ATTENTION_MODES)}, "
                           f"got {self.attention!r}")
        for name in ("flops_per_s", "hbm_bytes_per_s", "h2d_bytes_per_s", "d2h_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise SimError(f"cost model {name} must be > 0, got {getattr(self, name)!r}")
        if self.expert_bytes_per_rank and not (
                0 < self.experts_per_token <= self.num_experts
                and self.expert_bytes_per_rank <= self.weight_bytes_per_rank):
            raise SimError(
                f"cost model experts: {self.experts_per_token} of {self.num_experts} experts "
                f"({self.expert_bytes_per_rank:.3g} of {self.weight_bytes_per_rank:.3g} B); "
                "allowed: 0 < experts_per_token <= num_experts, expert bytes <= weight bytes")
        if not 1.0 <= self.accept_length <= max(1, self.verify_tokens):
            raise SimError(
                f"accept_length must be in [1, verify_tokens={self.verify_tokens}], "
                f"got {self.accept_length}"
            )

    # -- weights -------------------------------------------------------------------------
    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes one rank reads in a step of `tokens` tokens. With E routed experts
        and top-k routing (uniform, independent), an expert escapes all T tokens with
        probability (1 - k/E)^T, so E (1 - (1 - k/E)^T) experts are expected to be read;
        under EP each rank holds E/ep of them and reads its share, under TP a 1/tp slice of
        each: either way that fraction of the rank's expert bytes."""
        if not self.expert_bytes_per_rank:
            return self.weight_bytes_per_rank
        got = self._weights.get(tokens)
        if got is None:
            touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** max(
                tokens, 1.0)
            got = self._weights[tokens] = self.weight_bytes_per_rank - (
                self.expert_bytes_per_rank * (1.0 - touched))
        return got

    # -- prefill ---------------------------------------------------------------------------
    def prefill_flops(self, new_tokens: int, context_tokens: int) -> float:
        """FLOPs to prefill `new_tokens` after `context_tokens` already in the cache (causal)."""
        n = new_tokens
        attended = n * context_tokens + n * (n + 1) / 2
        return n * self.flops_per_token_per_rank + (
            attended * self.attention_flops_per_token_per_context_token_per_rank
        )

    # -- decode ----------------------------------------------------------------------------
    def decode_lines(self, batch: int) -> tuple[float, float, float, float]:
        """A decode step's time as two lines in the batch's total context C:
        memory = a_mem + b_mem * C and compute = a_cmp + b_cmp * C (seconds)."""
        lines = self._lines.get(batch)
        if lines is None:
            lines = self._lines[batch] = self._decode_lines(batch)
        return lines

    def _decode_lines(self, batch: int) -> tuple[float, float, float, float]:
        per_step = self.verify_tokens
        a_mem = self.weight_bytes_read(per_step * batch) / self.hbm_bytes_per_s
        b_mem = self.kv_bytes_per_token_per_rank / (
            self.hbm_bytes_per_s * min(1.0, self.decode_kv_read_efficiency
                                       * min(batch, self.decode_kv_parallel_batch)))
        a_cmp = per_step * batch * self.flops_per_token_per_rank / self.flops_per_s
        # per_request: each query scores its own context, so the batch's pairs are C;
        # packed_dense: each of the batch's queries scores every key of the batch: batch x C.
        queries = per_step * (batch if self.attention == "packed_dense" else 1)
        b_cmp = queries * self.attention_flops_per_token_per_context_token_per_rank / (
            self.flops_per_s
        )
        return a_mem, b_mem, a_cmp, b_cmp

    def decode_overhead_s(self, batch: int) -> float:
        """Host time of one decode step of `batch` sequences."""
        return self.step_overhead_s + self.per_sequence_overhead_s * batch

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        a_mem, b_mem, a_cmp, b_cmp = self.decode_lines(batch)
        body = max(a_mem + b_mem * context_tokens, a_cmp + b_cmp * context_tokens)
        return self.decode_overhead_s(batch) + body * (1 + self.draft_overhead_fraction)

    def decode_steps_s(self, batch: int, context0: float, growth: float, steps: int) -> float:
        """Sum of `steps` decode steps whose total context starts at `context0` and grows by
        `growth` per step: closed form, so decode advances between events, not step by step."""
        if steps <= 0:
            return 0.0
        return self.decode_stretch(batch, context0, growth)(steps)

    def decode_stretch(self, batch: int, context0: float, growth: float
                       ) -> Callable[[int], float]:
        """`decode_steps_s` for these batch and contexts as a function of the step count, the
        lines computed once (the engine searches a stretch's length by bisection)."""
        a_mem, b_mem, a_cmp, b_cmp = self.decode_lines(batch)
        # Each roofline arm is linear in the step index i: t(i) = a + b * i.
        m0, m1 = a_mem + b_mem * context0, b_mem * growth
        c0, c1 = a_cmp + b_cmp * context0, b_cmp * growth
        overhead_s = self.decode_overhead_s(batch)
        factor = 1 + self.draft_overhead_fraction
        body_s = _max_of_lines_sum(m0, m1, c0, c1)

        def steps_s(steps: int) -> float:
            if steps <= 0:
                return 0.0
            return steps * overhead_s + body_s(steps) * factor

        return steps_s

    def decode_steps_needed(self, output_tokens: int) -> int:
        """Decode steps after the first token (which prefill produces)."""
        return max(0, math.ceil((output_tokens - 1) / self.accept_length - 1e-9))

    # -- transfers -------------------------------------------------------------------------
    def load_s(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return self.load_fixed_s + tokens * self.kv_bytes_per_token_per_rank / self.h2d_bytes_per_s

    def backup_s(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return tokens * self.kv_bytes_per_token_per_rank / self.d2h_bytes_per_s

    # -- a whole step ----------------------------------------------------------------------
    def step_s(
        self,
        prefill_chunks: list[tuple[int, int]],
        decode_batch: int,
        decode_context: float,
        load_tokens: int = 0,
        sync_backup_tokens: int = 0,
        load_time_s: float | None = None,
        sync_time_s: float | None = None,
    ) -> float:
        """One forward pass over prefill chunks (new, context) and a decode batch. Load-back
        overlaps the compute layer by layer; write-back backups on eviction do not. The
        transfer times default to an idle link; `link.HostLink` gives them with the queue
        of their direction (`load_time_s`, `sync_time_s`)."""
        new = context = 0  # integers: the sums are exact in any order
        for n, c in prefill_chunks:
            new += n
            context += c
        read_tokens = context + new + decode_context
        if self.attention == "packed_dense" and prefill_chunks:
            # One attention call over the packed batch: every query token (prefill chunks and
            # decode tokens) against every key the step reads, masked pairs included.
            queries = new + decode_batch * self.verify_tokens
            flops = new * self.flops_per_token_per_rank + queries * read_tokens * (
                self.attention_flops_per_token_per_context_token_per_rank)
            if decode_batch:
                flops += decode_batch * self.verify_tokens * self.flops_per_token_per_rank
            compute = flops / self.flops_per_s
        else:
            # one chunk is the usual step, and the step the simulator's innermost loop: the
            # call without `starmap` (the same sum: 0 + x is x)
            flops = (self.prefill_flops(new, context) if len(prefill_chunks) == 1
                     else sum(starmap(self.prefill_flops, prefill_chunks)))
            compute = flops / self.flops_per_s
            if decode_batch:
                _, _, a_cmp, b_cmp = self.decode_lines(decode_batch)
                compute += a_cmp + b_cmp * decode_context
        step_tokens = new + decode_batch * self.verify_tokens
        memory = (
            self.weight_bytes_read(step_tokens) + read_tokens * self.kv_bytes_per_token_per_rank
        ) / self.hbm_bytes_per_s
        load = self.load_s(load_tokens) if load_time_s is None else load_time_s
        body = max(compute, memory, load)
        if decode_batch:
            body *= 1 + self.draft_overhead_fraction
        overhead = self.decode_overhead_s(len(prefill_chunks) + decode_batch)
        if prefill_chunks:
            overhead += self.prefill_overhead_s
        sync = self.backup_s(sync_backup_tokens) if sync_time_s is None else sync_time_s
        return overhead + body + sync

    def prefill_step_s(self, new: int, context: int, decode_context: float,
                       sync_time_s: float) -> float:
        """`step_s` of one prefill chunk (`new` tokens after `context`) with no decode batch
        and nothing loaded: a prefill stretch's steps (engine.py `_plan_stretch`), the
        simulator's most frequent, without the general call's lists and branches. The same
        operations in the same order as `step_s`, so the same float."""
        read_tokens = context + new + decode_context
        if self.attention == "packed_dense":
            flops = new * self.flops_per_token_per_rank + new * read_tokens * (
                self.attention_flops_per_token_per_context_token_per_rank)
        else:
            flops = self.prefill_flops(new, context)
        compute = flops / self.flops_per_s
        memory = (
            self.weight_bytes_read(new) + read_tokens * self.kv_bytes_per_token_per_rank
        ) / self.hbm_bytes_per_s
        body = max(compute, memory, 0.0)
        return self.decode_overhead_s(1) + self.prefill_overhead_s + body + sync_time_s

    # -- constructors ----------------------------------------------------------------------
    def with_speculation(self, accept_length: float, verify_tokens: int,
                         draft_overhead_fraction: float = 0.1) -> CostModel:
        return replace(self, accept_length=accept_length, verify_tokens=verify_tokens,
                       draft_overhead_fraction=draft_overhead_fraction)

    def with_engine(self, engine: Any, hardware: Any = None) -> CostModel:
        """Apply an engine profile (`engine_profile.EngineProfile`): its overheads, attention
        mode and attention efficiency and, when it asks for them, the hardware profile's layer
        efficiencies (prefill scales FLOP/s, decode scales HBM bandwidth: the phase each
        bounds). A profile without layer timings keeps its achievable fractions instead."""
        flops, hbm = self.flops_per_s, self.hbm_bytes_per_s
        if engine.use_layer_efficiency and hardware is not None:
            prefill = hardware.layer_efficiency("prefill")
            decode = hardware.layer_efficiency("decode")
            if prefill is not None and decode is not None:
                flops, hbm = flops * prefill, hbm * decode
        # A slower attention kernel is costed as more FLOPs at the same rate, so the step
        # formulas (and the closed-form decode sums) stay as they are.
        attention = self.attention_flops_per_token_per_context_token_per_rank / (
            engine.attention_efficiency.value)
        return replace(
            self, flops_per_s=flops, hbm_bytes_per_s=hbm,
            attention_flops_per_token_per_context_token_per_rank=attention,
            step_overhead_s=engine.step_overhead_s.value,
            prefill_overhead_s=engine.prefill_overhead_s.value,
            per_sequence_overhead_s=engine.per_sequence_overhead_s.value,
            attention=engine.attention, engine=engine.name,
            admit_full_prompt=bool(engine.admit_full_prompt.value),
            load_ready_steps=int(engine.load_ready_steps.value),
            load_stall_s=engine.load_stall_s.value,
            load_back_min_tokens=int(engine.load_back_min_tokens.value),
            prompt_token_overhead_s=engine.prompt_token_overhead_s.value,
            h2d_bytes_per_s=self.h2d_bytes_per_s * engine.load_bandwidth_efficiency.value,
            decode_kv_read_efficiency=engine.decode_kv_read_efficiency.value,
            decode_kv_parallel_batch=engine.decode_kv_parallel_batch.value,
        )

    @classmethod
    def from_profiles(cls, model: Any, hardware: Any, tp: int = 1, *,
                      precision: str = "bf16", kv_dtype: str | None = None,
                      dp_attention: bool = False, engine: Any = None) -> CostModel:
        """From a `kvbench.models.ModelProfile` and a `kvbench.hardware.HardwareProfile`:
        weights and dense FLOPs split over TP ranks; KV bytes per rank as the model reports
        them (MLA latents are replicated, GQA heads split). The
        KV dtype defaults to the model's for that precision; `engine` (an EngineProfile)
        replaces the built-in SGLang-like overheads."""
        if tp < 1:
            raise SimError(f"tp must be >= 1, got {tp}")
        if kv_dtype is None:
            kv_dtype_for = getattr(model, "kv_dtype_for", None)
            kv_dtype = kv_dtype_for(precision) if kv_dtype_for else "bf16"
        kv_per_token = float(model.kv_bytes_per_token(tp, dp_attention=dp_attention,
                                                      kv_dtype=kv_dtype))
        pools = (model.kv_pools(tp, dp_attention=dp_attention, kv_dtype=kv_dtype)
                 if hasattr(model, "kv_pools") else [])
        state_bytes = sum(p.fixed_bytes_per_request_per_rank for p in pools)
        weight_bytes = model.weight_bytes(precision)
        routed = model.routed_expert_params() if hasattr(model, "routed_expert_params") else 0
        # a published checkpoint size spreads over the parameters in proportion
        expert_bytes = weight_bytes * routed / model.total_params if routed else 0.0
        costs = cls(
            weight_bytes_per_rank=weight_bytes / tp,
            expert_bytes_per_rank=expert_bytes / tp,
            num_experts=getattr(model, "num_experts", 0) if routed else 0,
            experts_per_token=getattr(model, "experts_per_token", 0) if routed else 0,
            kv_bytes_per_token_per_rank=kv_per_token,
            request_state_tokens=math.ceil(state_bytes / kv_per_token),
            # the FLA kernels' chunk (sglang 0.5.23 kernels/ops/attention/fla/chunk_delta_h.py
            # CHUNK_SIZE = 64; 0.5.17's copy srt/hardware_backend/xpu/kernels/fla/
            # chunk_delta_h.py:21), SGLang's unit of GDN state checkpoints
            state_checkpoint_tokens=64 if any(p.name == "mamba" for p in pools) else 0,
            flops_per_token_per_rank=model.dense_flops_per_token() / tp,
            attention_flops_per_token_per_context_token_per_rank=(
                model.attention_flops_per_token_per_context_token() / tp
            ),
            flops_per_s=hardware.flops(precision),
            hbm_bytes_per_s=hardware.hbm_bandwidth,
            h2d_bytes_per_s=hardware.h2d_bandwidth,
            d2h_bytes_per_s=hardware.d2h_bandwidth,
            label=f"{model.name} {precision} tp{tp} on {hardware.name}",
        )
        return costs if engine is None else costs.with_engine(engine, hardware)

    @classmethod
    def reference(cls, hardware: Any, engine: Any = None) -> CostModel:
        """A Llama-3.1-8B-shaped dense model at TP1 (32 layers, 8 KV heads x 128, bf16), for
        runs that name no model: 16 GB weights, 128 KiB KV per token, 2 x 8e9 FLOPs per token,
        4 x 32 heads x 128 x 32 layers attention FLOPs per context token."""
        costs = cls(
            weight_bytes_per_rank=16.06e9,
            kv_bytes_per_token_per_rank=131072.0,
            flops_per_token_per_rank=2 * 8.03e9,
            attention_flops_per_token_per_context_token_per_rank=4 * 32 * 128 * 32,
            flops_per_s=hardware.flops("bf16"),
            hbm_bytes_per_s=hardware.hbm_bandwidth,
            h2d_bytes_per_s=hardware.h2d_bandwidth,
            d2h_bytes_per_s=hardware.d2h_bandwidth,
            label=f"reference-8b tp1 on {hardware.name}",
        )
        return costs if engine is None else costs.with_engine(engine, hardware)


def _sum_lines(a: float, b: float, lo: int, hi: int) -> float:
    """sum_{i=lo}^{hi-1} (a + b*i)."""
    n = hi - lo
    if n <= 0:
        return 0.0
    return n * a + b * (lo + hi - 1) * n / 2


def _max_of_lines_sum(m0: float, m1: float, c0: float, c1: float) -> Callable[[int], float]:
    """steps -> sum_{i=0}^{steps-1} max(m0 + m1*i, c0 + c1*i): two lines cross at most once,
    where found once (a stretch's length is searched by bisection over this)."""
    if m1 == c1:
        a, b = (m0, m1) if m0 >= c0 else (c0, c1)
        return lambda steps: _sum_lines(a, b, 0, steps)
    cross = (c0 - m0) / (m1 - c1)  # memory >= compute for i >= cross when m1 > c1
    cross_k = math.ceil(cross) if cross > 0 else 0
    (a1, b1), (a2, b2) = ((c0, c1), (m0, m1)) if m1 > c1 else ((m0, m1), (c0, c1))

    def total(steps: int) -> float:
        k = cross_k if cross_k < steps else steps  # the first line's steps, in [0, steps]
        return _sum_lines(a1, b1, 0, k) + _sum_lines(a2, b2, k, steps)

    return total
