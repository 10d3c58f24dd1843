from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbench.calibrate.shape import LayerShape, resolve_shape, shape_from_model
from kvbench.errors import CalibrateError


def test_layer_params_of_qwen3_8b(qwen3_8b):
    # q,k,v: 4096 x (4096 + 2 x 1024); o: 4096 x 4096; mlp: 3 x 4096 x 12288; norms
    assert qwen3_8b.params == 25_165_824 + 16_777_216 + 150_994_944 + 8_192 + 256


def test_flops_by_hand(tiny):
    # tiny: hidden 16, q 16, kv 8, inter 32: macs = 16*(16+16) + 16*16 + 3*16*32 = 2304
    assert tiny.linear_flops(3) == 2 * 3 * 2304
    # prefill of 3 tokens from scratch: 1+2+3 = 6 (query, key) pairs x 4 x heads 2 x dim 8
    assert tiny.attention_flops(1, 3, 3) == 4 * 2 * 8 * 6
    # decode 1 token over 5 of context: 5 pairs, batch 2
    assert tiny.attention_flops(2, 1, 5) == 4 * 2 * 2 * 8 * 5


def test_shape_from_model_solves_intermediate_size(qwen3_8b):
    embed = 2 * 151_936 * 4096
    profile = SimpleNamespace(
        name="Qwen/Qwen3-8B", num_layers=36, hidden_size=4096, num_attention_heads=32,
        num_kv_heads=8, head_dim=128, vocab_size=151_936,
        active_params=36 * qwen3_8b.params + embed,
    )
    assert shape_from_model(profile).intermediate_size == 12288


def test_resolve_shape_from_numbers():
    shape = resolve_shape(None, {
        "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2,
        "head_dim": 16, "intermediate_size": 128,
    })
    assert shape == LayerShape("custom", 2, 64, 4, 2, 16, 128, 0)
    assert resolve_shape(None, {"num_layers": None}) is None


def test_resolve_shape_names_missing_flags():
    with pytest.raises(CalibrateError, match="missing hidden_size") as e:
        resolve_shape(None, {"num_layers": 2})
    assert "--num-heads" in (e.value.hint or "")


def test_gqa_heads_must_divide():
    with pytest.raises(CalibrateError, match="multiple of num_kv_heads"):
        LayerShape("x", 1, 64, 6, 4, 16, 128)
