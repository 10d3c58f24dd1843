"""The cost model with round numbers (see conftest.plain_costs)."""

from __future__ import annotations

import pytest
from sim.conftest import plain_costs

from kvbench.errors import SimError
from kvbench.hardware import load_hardware
from kvbench.sim.costs import CostModel


def test_prefill_flops_dense_plus_causal_attention(costs):
    # 2 new tokens after 3 cached: attended pairs 2*3 + (1 + 2) = 9
    assert costs.prefill_flops(2, 3) == 2 * 1e10 + 9 * 1e5


def test_decode_step_is_bytes_over_bandwidth(costs):
    # 1e9 weight bytes + 1000 tokens x 1e5 bytes at 1e12 B/s = 1.1 ms; compute is 1e-5 s
    assert costs.decode_step_s(1, 1000) == pytest.approx(1.1e-3)


@pytest.mark.parametrize("batch,context0,growth,steps", [
    (1, 1000, 1, 10), (64, 5e5, 64, 300), (4000, 0, 4000, 50), (2, 1e7, 2, 1), (8, 0, 8, 0)])
def test_decode_stretch_closed_form_equals_step_by_step(batch, context0, growth, steps):
    # Heavy FLOPs make the roofline cross from compute-bound to memory-bound mid-stretch.
    costs = plain_costs(flops_per_token_per_rank=3e11, step_overhead_s=1e-4)
    by_step = sum(costs.decode_step_s(batch, context0 + growth * i) for i in range(steps))
    assert costs.decode_steps_s(batch, context0, growth, steps) == pytest.approx(by_step)


def test_load_back_overlaps_compute_and_write_back_does_not(costs):
    base = costs.step_s([(1000, 0)], 0, 0)
    assert base == pytest.approx(1000 * 1e10 / 1e15 + 500500 * 1e5 / 1e15)
    # 10 tokens x 1e5 B at 1e10 B/s = 0.1 ms: hidden under the 10 ms prefill
    assert costs.step_s([(1000, 0)], 0, 0, load_tokens=10) == base
    # 10,000 tokens = 100 ms of load-back: the step waits for it
    assert costs.step_s([(1000, 0)], 0, 0, load_tokens=10_000) == pytest.approx(0.1)
    assert costs.step_s([(1000, 0)], 0, 0, sync_backup_tokens=10) == pytest.approx(base + 1e-4)


def test_speculation_needs_fewer_steps(costs):
    assert costs.decode_steps_needed(101) == 100
    spec = costs.with_speculation(accept_length=2.5, verify_tokens=4)
    assert spec.decode_steps_needed(101) == 40
    with pytest.raises(SimError, match="accept_length"):
        costs.with_speculation(accept_length=5, verify_tokens=4)


def test_from_profiles_splits_weights_and_flops_over_tp():
    class Llama8B:  # the planner's ModelProfile interface (CONTRACTS.md section 2)
        name = "llama-8b"

        def weight_bytes(self, precision: str) -> int:
            return 16_000_000_000

        def kv_bytes_per_token(self, tp: int, dp_attention: bool = False,
                               kv_dtype: str = "bf16") -> int:
            return 131072 // tp

        def dense_flops_per_token(self) -> float:
            return 1.6e10

        def attention_flops_per_token_per_context_token(self) -> float:
            return 524288.0

    h200 = load_hardware("h200")
    costs = CostModel.from_profiles(Llama8B(), h200, tp=2)
    assert costs.weight_bytes_per_rank == 8e9
    assert costs.kv_bytes_per_token_per_rank == 65536
    assert costs.flops_per_token_per_rank == 8e9
    assert costs.flops_per_s == h200.flops("bf16")
    assert costs.h2d_bytes_per_s == h200.h2d_bandwidth


def test_real_profiles_from_the_planner():
    from kvbench.sim.sizing import gpu_tier_tokens, resolve_costs

    llama = resolve_costs("llama-3.1-8b", "h200", 1)
    reference = resolve_costs("reference-8b", "h200", 1)
    assert llama.kv_bytes_per_token_per_rank == reference.kv_bytes_per_token_per_rank == 131072
    assert llama.flops_per_token_per_rank == pytest.approx(reference.flops_per_token_per_rank)
    assert llama.attention_flops_per_token_per_context_token_per_rank == pytest.approx(
        reference.attention_flops_per_token_per_context_token_per_rank)
    # 141 GB x 0.88 - 16.06 GB of weights over 128 KiB per token
    assert gpu_tier_tokens(llama, "h200") == int((141e9 * 0.88 - 16.06e9) // 131072)
    # Qwen3.5's gated-delta-net state per request is reserved as token-equivalents
    qwen = resolve_costs("Qwen/Qwen3.5-397B-A17B-FP8", "h200", 8)  # fp8 from the name
    assert qwen.label.startswith("Qwen3.5-397B-A17B fp8")
    assert qwen.request_state_tokens > 1000
    assert qwen.weight_bytes_per_rank < llama.weight_bytes_per_rank * 4


def test_unknown_model_names_the_way_out():
    from kvbench.errors import KvbenchError
    from kvbench.sim.sizing import resolve_costs

    with pytest.raises(KvbenchError):
        resolve_costs("no-such-model", "h200", 1)
    with pytest.raises(SimError, match="tp 1"):
        resolve_costs("reference-8b", "h200", 2)


@pytest.mark.parametrize("attention", ["per_request", "packed_dense"])
@pytest.mark.parametrize("experts", [False, True])
def test_a_prefill_step_alone_costs_the_same_float_as_the_general_step(attention, experts):
    """`prefill_step_s` (a prefill stretch's steps) is `step_s` of one chunk with no decode
    batch and nothing loaded, to the last bit: stretches must not move a single time."""
    # by hand (conftest's round numbers, no overheads): 1,000 tokens after 0, compute-bound:
    # (1000 x 1e10 + 500,500 pairs x 1e5) / 1e15 = 10.05005 ms; memory (1e9 + 1e8) / 1e12 =
    # 1.1 ms; plus 2 ms of write-back wait
    assert plain_costs().prefill_step_s(1000, 0, 0.0, 0.002) == pytest.approx(0.01205005)
    moe = dict(expert_bytes_per_rank=7e8, experts_per_token=8, num_experts=256) if experts \
        else {}
    costs = plain_costs(attention=attention, step_overhead_s=3.1e-3, prefill_overhead_s=7e-4,
                        per_sequence_overhead_s=1.3e-5, **moe)
    for new, context, decode_context, sync_s in [
            (8192, 0, 0.0, 0.0), (16384, 123_457, 0.0, 0.0), (1, 999_999, 0.0, 0.25),
            (4096, 77_777, 3.000000000000001, 1e-7), (2048, 5, -0.0, 0.0)]:
        general = costs.step_s([(new, context)], 0, decode_context, 0, 0, 0.0, sync_s)
        assert costs.prefill_step_s(new, context, decode_context, sync_s) == general
