"""Moving KV pages between a pinned host pool and a per-layer GPU pool, per host layout.

Pages are picked at random in both pools, as a radix cache hands them out, so no two pages of
a transfer are adjacent and every chunk is its own copy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench.calibrate.layout import (
    KvPageShape,
    copies_per_page,
    device_pool_shape,
    host_pool_shape,
)
from kvbench.calibrate.timer import Timing, is_cuda, time_fn

POOL_SLACK = 4  # pools hold this many times the transferred pages, to pick pages at random


@dataclass(slots=True)
class PageTransfer:
    """The pools of one transfer and the step that moves the chosen pages."""

    host: Any
    dev: Any
    host_pages: list[int]
    dev_pages: list[int]
    step: Callable[[], None]


@dataclass(frozen=True, slots=True)
class PagePoint:
    layout: str
    direction: str
    shape: KvPageShape
    num_pages: int
    timing: Timing

    @property
    def copies_per_page(self) -> int:
        return copies_per_page(self.layout, self.shape)

    @property
    def bytes_per_s(self) -> float:
        return self.num_pages * self.shape.page_bytes / self.timing.median_s


def make_transfer(
    layout: str,
    direction: str,
    shape: KvPageShape,
    num_pages: int,
    *,
    device: Any,
    seed: int = 0,
) -> PageTransfer:
    """Build both pools (host pinned when the device is CUDA) and the copy step.
    layer_first issues one copy per (K/V, layer, page); page_first copies each page's K and V
    blocks whole into a staging buffer, and one indexed device copy scatters (or, for d2h,
    gathers) them to the per-layer pool."""
    import torch

    dtype = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}[shape.dtype_bytes]
    pool_pages = num_pages * POOL_SLACK
    gen = torch.Generator().manual_seed(seed)
    host_pages = torch.randperm(pool_pages, generator=gen)[:num_pages].tolist()
    dev_pages = torch.randperm(pool_pages, generator=gen)[:num_pages].tolist()
    host = torch.empty(
        host_pool_shape(layout, shape, pool_pages), dtype=dtype, pin_memory=is_cuda(device)
    )
    dev = torch.empty(device_pool_shape(shape, pool_pages), dtype=dtype, device=device)
    host.view(torch.uint8).random_(0, 255, generator=gen)
    dev.view(torch.uint8).random_(0, 255)
    h2d = direction == "h2d"

    if layout == "layer_first":
        pairs = list(zip(host_pages, dev_pages, strict=True))

        def step() -> None:
            for kv in range(2):
                for layer in range(shape.num_layers):
                    h_layer, d_layer = host[kv, layer], dev[kv, layer]
                    for hp, dp in pairs:
                        if h2d:
                            d_layer[dp].copy_(h_layer[hp], non_blocking=True)
                        else:
                            h_layer[hp].copy_(d_layer[dp], non_blocking=True)
    else:
        # staging [2, n, L, page, H, d] mirrors the host page blocks
        staging = torch.empty((2, num_pages, *host.shape[2:]), dtype=dtype, device=device)
        dev_idx = torch.tensor(dev_pages, device=device)

        def step() -> None:
            if h2d:
                for kv in range(2):
                    for i, hp in enumerate(host_pages):
                        staging[kv, i].copy_(host[kv, hp], non_blocking=True)
                # pool[:, :, idx] is [2, L, n, ...]; staging is [2, n, L, ...]
                dev[:, :, dev_idx] = staging.transpose(1, 2)
            else:
                staging.copy_(dev[:, :, dev_idx].transpose(1, 2))
                for kv in range(2):
                    for i, hp in enumerate(host_pages):
                        host[kv, hp].copy_(staging[kv, i], non_blocking=True)

    return PageTransfer(host, dev, host_pages, dev_pages, step)


def time_page_transfer(
    layout: str,
    direction: str,
    shape: KvPageShape,
    num_pages: int,
    *,
    device: Any,
    seed: int = 0,
    repeats: int = 5,
) -> PagePoint:
    """Time moving `num_pages` random pages one way between the pools."""
    transfer = make_transfer(layout, direction, shape, num_pages, device=device, seed=seed)
    timing = time_fn(transfer.step, device=device, warmup=1, repeats=repeats)
    return PagePoint(layout, direction, shape, num_pages, timing)
