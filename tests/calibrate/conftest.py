"""Calibrate fixtures: the Qwen3-8B layer shape and a tiny one."""

from __future__ import annotations

import pytest

from kvbench.calibrate.shape import LayerShape


@pytest.fixture
def qwen3_8b() -> LayerShape:
    return LayerShape(
        name="Qwen3-8B", num_layers=36, hidden_size=4096, num_attention_heads=32,
        num_kv_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
    )


@pytest.fixture
def tiny() -> LayerShape:
    return LayerShape(
        name="tiny", num_layers=2, hidden_size=16, num_attention_heads=2, num_kv_heads=1,
        head_dim=8, intermediate_size=32, vocab_size=64,
    )


@pytest.fixture(scope="session")
def torch():
    """torch, imported by the tests that use it and not at collection: every pytest-xdist
    worker collects every module, and torch's import is seconds of CPU."""
    return pytest.importorskip("torch")
