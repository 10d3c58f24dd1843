"""KV page layouts in host memory and the copies each one needs per page.

A page holds `page_size_tokens` tokens of K and V for every layer. How those bytes lie in the
host pool decides how many cudaMemcpyAsync calls a page costs (SGLang HiCache, §1.2 of the
kvoffload reference):

- `layer_first` host pool `[2, L, pages, page, H_kv, d]`: a page is 2·L separate chunks of
  `page · H_kv · d · b` bytes, one copy each (the `direct` io path).
- `page_first` host pool `[2, pages, L, page, H_kv, d]` (SGLang's `page_first_direct`): a page
  is 2 contiguous chunks (K and V) of `L · page · H_kv · d · b` bytes; the device pool is per
  layer, so the copy lands in a staging buffer and one device kernel scatters it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbench.errors import CalibrateError

Layout = Literal["layer_first", "page_first"]
LAYOUTS: tuple[Layout, ...] = ("layer_first", "page_first")


@dataclass(frozen=True, slots=True)
class KvPageShape:
    """One KV page of a GQA model on one rank."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    page_size_tokens: int
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "page_size_tokens", "dtype_bytes"):
            if getattr(self, name) < 1:
                raise CalibrateError(f"KvPageShape.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def layer_chunk_bytes(self) -> int:
        """K (or V) of one page in one layer: the unit a layer_first copy moves."""
        return self.page_size_tokens * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def page_bytes(self) -> int:
        return self.page_size_tokens * self.bytes_per_token


def check_layout(layout: str) -> Layout:
    if layout not in LAYOUTS:
        raise CalibrateError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout  # type: ignore[return-value]


def copies_per_page(layout: str, shape: KvPageShape) -> int:
    """cudaMemcpyAsync calls one page needs between host and device."""
    return 2 * shape.num_layers if check_layout(layout) == "layer_first" else 2


def copy_bytes(layout: str, shape: KvPageShape) -> int:
    """Bytes each of those copies moves."""
    return shape.page_bytes // copies_per_page(layout, shape)


def host_pool_shape(layout: str, shape: KvPageShape, num_pages: int) -> tuple[int, ...]:
    """Dimensions of a host pool of `num_pages` pages (elements, not bytes)."""
    tail = (shape.page_size_tokens, shape.num_kv_heads, shape.head_dim)
    if check_layout(layout) == "layer_first":
        return (2, shape.num_layers, num_pages, *tail)
    return (2, num_pages, shape.num_layers, *tail)


def device_pool_shape(shape: KvPageShape, num_pages: int) -> tuple[int, ...]:
    """The GPU pool is per layer in every engine: `[2, L, pages, page, H_kv, d]`."""
    return (2, shape.num_layers, num_pages, shape.page_size_tokens, shape.num_kv_heads,
            shape.head_dim)


def pages_for_bytes(shape: KvPageShape, target_bytes: int, *, max_pages: int = 512) -> int:
    """How many pages make roughly `target_bytes` (at least one, at most `max_pages`)."""
    return max(1, min(max_pages, round(target_bytes / shape.page_bytes)))
