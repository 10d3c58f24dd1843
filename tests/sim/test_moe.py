"""MoE decode reads the shared weights plus the experts the batch touches, not every expert."""

from __future__ import annotations

import pytest

from kvbench.hardware import load_hardware
from kvbench.models import load_model
from kvbench.sim.costs import CostModel


def _moe(**kw) -> CostModel:
    base = dict(weight_bytes_per_rank=10e9, kv_bytes_per_token_per_rank=1e5,
                flops_per_token_per_rank=1e9,
                attention_flops_per_token_per_context_token_per_rank=1e4,
                flops_per_s=1e15, hbm_bytes_per_s=1e12, h2d_bytes_per_s=5e10,
                d2h_bytes_per_s=5e10, step_overhead_s=0.0,
                expert_bytes_per_rank=8e9, num_experts=8, experts_per_token=2)
    return CostModel(**{**base, **kw})


def test_expected_distinct_experts_by_hand() -> None:
    c = _moe()
    # 1 token: 2 of 8 experts -> 2e9 shared + 8e9 * 2/8
    assert c.weight_bytes_read(1) == pytest.approx(4e9)
    # 2 tokens: each expert missed with (6/8)^2 = 0.5625 -> 8e9 * 0.4375 = 3.5e9 read
    assert c.weight_bytes_read(2) == pytest.approx(5.5e9)
    # 4 tokens: 1 - 0.75^4 = 0.68359375 -> 2e9 + 5.46875e9
    assert c.weight_bytes_read(4) == pytest.approx(7.46875e9)
    # prefill-sized steps touch every expert
    assert c.weight_bytes_read(4096) == pytest.approx(10e9)


def test_decode_step_time_uses_the_touched_experts() -> None:
    c = _moe()
    # batch 2, 1,000 context tokens in total: memory (5.5e9 + 1e3 * 1e5) B / 1e12 B/s
    # = 5.6 ms; compute 2e9 / 1e15 + 1e4 * 1e3 / 1e15 is microseconds
    assert c.decode_step_s(2, 1000) == pytest.approx(5.6e-3)
    dense = _moe(expert_bytes_per_rank=0.0)
    assert dense.decode_step_s(2, 1000) == pytest.approx(10.1e-3)
    # a mixed step (one 14-token chunk, two decoders): 16 tokens read 1 - 0.75^16 of experts
    step = c.step_s([(14, 0)], 2, 1000)
    touched = 1 - 0.75 ** 16
    assert step == pytest.approx((2e9 + 8e9 * touched + (14 + 1000) * 1e5) / 1e12)


def test_gpt_oss_at_one_token_reads_its_active_weights() -> None:
    """gpt-oss-120b (128 experts, top-4), bf16 at TP 2: one decode token reads the
    non-expert weights plus 4 experts per layer, which is the model card's 5.1 B active
    parameters: 5.1e9 x 2 B / 2 ranks = 5.1e9 B per rank, not the 116.8e9 B of all."""
    model = load_model("gpt-oss-120b")
    c = CostModel.from_profiles(model, load_hardware("h200"), tp=2, precision="bf16")
    assert (c.num_experts, c.experts_per_token) == (128, 4)
    assert c.weight_bytes_per_rank == pytest.approx(116.8e9 * 2 / 2)
    assert c.weight_bytes_read(1) == pytest.approx(5.1e9, rel=1e-6)
    # 64 decode tokens: 1 - (124/128)^64 = 0.8688 of the experts
    expert = (116.8e9 - 5.1e9) * 128 / 124
    want = 116.8e9 - expert * (124 / 128) ** 64
    assert c.weight_bytes_read(64) == pytest.approx(want, rel=1e-6)


def test_dense_model_reads_everything() -> None:
    c = CostModel.from_profiles(load_model("qwen3-8b"), load_hardware("h200"))
    assert c.expert_bytes_per_rank == 0
    assert c.weight_bytes_read(1) == c.weight_bytes_per_rank
