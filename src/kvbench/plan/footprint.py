"""Projected host footprint: pools x ranks on the node, plus what pinning adds.

Pinning policies (reference/kvoffload.md 1.5): `exact` for mmap + cudaHostRegister or
cudaHostAlloc, which pin what was asked; `pow2` for torch `pin_memory=True`, whose caching
host allocator rounds every allocation up to the next power of two (up to 2x)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kvbench.plan.plan import HostPool

PIN_POLICIES = ("exact", "pow2")


def pinned_bytes(allocation_bytes: int, policy: str) -> int:
    """What the host actually pins for one allocation of `allocation_bytes`."""
    if policy == "pow2" and allocation_bytes > 0:
        return 1 << (allocation_bytes - 1).bit_length()
    return allocation_bytes


def pin_overhead_bytes(pools: Iterable[HostPool], policy: str) -> int:
    """Extra bytes pinned beyond the pools themselves (each pool is one allocation)."""
    return sum(pinned_bytes(p.bytes_per_rank, policy) - p.bytes_per_rank for p in pools)


def per_rank_bytes(pools: Iterable[HostPool], policy: str) -> int:
    pools = list(pools)
    return sum(p.bytes_per_rank for p in pools) + pin_overhead_bytes(pools, policy)


def largest_fitting(per_rank_of: Callable[[int], int], hi: int, limit_bytes: int) -> int | None:
    """Largest x in [0, hi] with per_rank_of(x) <= limit_bytes (per_rank_of non-decreasing),
    or None when even x = 0 does not fit."""
    if per_rank_of(0) > limit_bytes:
        return None
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if per_rank_of(mid) <= limit_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
