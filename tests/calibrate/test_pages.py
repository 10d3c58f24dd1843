from __future__ import annotations

import pytest

from kvbench.calibrate.layout import LAYOUTS, KvPageShape
from kvbench.calibrate.pages import make_transfer, time_page_transfer

pytestmark = pytest.mark.usefixtures("torch")  # skipped without torch

SHAPE = KvPageShape(num_layers=3, num_kv_heads=2, head_dim=4, page_size_tokens=2)


def _bytes(t, torch):
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_transfer_moves_exactly_the_chosen_pages(layout, direction, torch):
    t = make_transfer(layout, direction, SHAPE, 3, device="cpu", seed=1)
    before_host, before_dev = t.host.clone(), t.dev.clone()
    t.step()
    for hp, dp in zip(t.host_pages, t.dev_pages, strict=True):
        host_page = t.host[:, :, hp] if layout == "layer_first" else t.host[:, hp]
        assert torch.equal(_bytes(host_page, torch), _bytes(t.dev[:, :, dp], torch))
    # the source pool is untouched
    src, before = (t.host, before_host) if direction == "h2d" else (t.dev, before_dev)
    assert torch.equal(_bytes(src, torch), _bytes(before, torch))


def test_time_page_transfer_reports_rate_from_page_bytes():
    point = time_page_transfer("page_first", "h2d", SHAPE, 2, device="cpu", repeats=2)
    assert point.copies_per_page == 2
    assert point.bytes_per_s == pytest.approx(2 * SHAPE.page_bytes / point.timing.median_s)
