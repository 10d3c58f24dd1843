"""Fixtures for the simulator tests: small real traces and plain-number cost models."""

from __future__ import annotations

import pytest
from conftest import TRACES

from kvbench.sim.costs import CostModel

MOONCAKE = TRACES / "mooncake" / "conversation_trace.jsonl.gz"
MOONCAKE_SYNTHETIC = TRACES / "mooncake" / "synthetic_trace.jsonl.gz"
CLAUDE_CODE = TRACES / "claude-code"


def plain_costs(**overrides: float) -> CostModel:
    """Round numbers so that expected times can be computed by hand: 1e15 FLOP/s, 1e12 B/s
    HBM, 1e10 B/s link, 1e9 weight bytes, 1e5 KV bytes per token, 1e10 FLOPs per token."""
    values = dict(
        weight_bytes_per_rank=1e9, kv_bytes_per_token_per_rank=1e5,
        flops_per_token_per_rank=1e10, attention_flops_per_token_per_context_token_per_rank=1e5,
        flops_per_s=1e15, hbm_bytes_per_s=1e12, h2d_bytes_per_s=1e10, d2h_bytes_per_s=1e10,
        step_overhead_s=0.0, load_fixed_s=0.0,
    )
    values.update(overrides)
    return CostModel(**values)


@pytest.fixture()
def costs() -> CostModel:
    return plain_costs()


@pytest.fixture(scope="session")
def claude_code_paths():
    return sorted(CLAUDE_CODE.glob("trace_*.json.gz"))[:12]
