from __future__ import annotations

import pytest

from kvbench.calibrate.layout import (
    KvPageShape,
    copies_per_page,
    copy_bytes,
    device_pool_shape,
    host_pool_shape,
    pages_for_bytes,
)
from kvbench.errors import CalibrateError
from kvbench.units import MiB

QWEN3_PAGE64 = KvPageShape(num_layers=36, num_kv_heads=8, head_dim=128, page_size_tokens=64)


def test_page_bytes_of_qwen3_8b():
    # 2 (K,V) x 36 layers x 8 heads x 128 dims x 2 bytes = 147,456 B per token
    assert QWEN3_PAGE64.bytes_per_token == 147_456
    assert QWEN3_PAGE64.layer_chunk_bytes == 64 * 8 * 128 * 2 == 131_072
    assert QWEN3_PAGE64.page_bytes == 64 * 147_456 == 9_437_184


def test_copies_per_layout():
    assert copies_per_page("layer_first", QWEN3_PAGE64) == 72
    assert copy_bytes("layer_first", QWEN3_PAGE64) == 131_072
    assert copies_per_page("page_first", QWEN3_PAGE64) == 2
    assert copy_bytes("page_first", QWEN3_PAGE64) == 36 * 131_072


def test_pool_shapes():
    assert host_pool_shape("layer_first", QWEN3_PAGE64, 10) == (2, 36, 10, 64, 8, 128)
    assert host_pool_shape("page_first", QWEN3_PAGE64, 10) == (2, 10, 36, 64, 8, 128)
    assert device_pool_shape(QWEN3_PAGE64, 10) == (2, 36, 10, 64, 8, 128)


def test_pages_for_bytes_rounds_and_clamps():
    assert pages_for_bytes(QWEN3_PAGE64, 128 * MiB) == 14  # 134,217,728 / 9,437,184 = 14.2
    assert pages_for_bytes(QWEN3_PAGE64, 1) == 1
    assert pages_for_bytes(QWEN3_PAGE64, 10**12, max_pages=7) == 7


def test_bad_layout_names_the_allowed_ones():
    with pytest.raises(CalibrateError, match="layer_first, page_first"):
        copies_per_page("page_head", QWEN3_PAGE64)


def test_bad_shape_names_the_field():
    with pytest.raises(CalibrateError, match="page_size_tokens must be >= 1, got 0"):
        KvPageShape(num_layers=1, num_kv_heads=1, head_dim=8, page_size_tokens=0)
