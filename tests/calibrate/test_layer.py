"""A tiny CPU run of the per-layer timing harness (float32: what CPUs compute well)."""

from __future__ import annotations

import pytest

from kvbench.calibrate.layer import build_layer, time_layer

pytestmark = pytest.mark.usefixtures("torch")  # skipped without torch


def test_layer_forward_keeps_shape_and_is_finite(tiny, torch):
    layer = build_layer(tiny, device="cpu", dtype=torch.float32)
    x = torch.randn(2, 5, tiny.hidden_size)
    with torch.no_grad():
        y = layer(x, torch.arange(5))
    assert y.shape == x.shape
    assert torch.isfinite(y).all()


def test_decode_attends_to_the_cache(tiny, torch):
    layer = build_layer(tiny, device="cpu", dtype=torch.float32)
    x = torch.randn(1, 1, tiny.hidden_size)
    cache = torch.randn(1, tiny.num_kv_heads, 6, tiny.head_dim)
    with torch.no_grad():
        a = layer(x, torch.tensor([5]), cache.clone(), cache.clone())
        other = cache.clone()
        other[:, :, 0] += 3.0
        b = layer(x, torch.tensor([5]), other, cache.clone())
    assert not torch.allclose(a, b)  # an earlier cached key changed the output


@pytest.mark.parametrize(("phase", "new"), [("prefill", 8), ("decode", 1)])
def test_time_layer_on_cpu(tiny, phase, new, torch):
    layer = build_layer(tiny, device="cpu", dtype=torch.float32)
    point = time_layer(layer, tiny, phase, 2, 8, device="cpu", dtype=torch.float32,
                       warmup=1, repeats=2)
    assert point.new_tokens == new
    assert point.timing.median_s > 0
    assert not point.graphed
    assert point.flops == tiny.linear_flops(2 * new) + tiny.attention_flops(2, new, 8)
    kv = 0 if phase == "prefill" else 2 * 8 * tiny.kv_bytes_per_token(4)
    assert point.hbm_bytes == tiny.params * 4 + kv
