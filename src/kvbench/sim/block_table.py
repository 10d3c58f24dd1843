"""A request's block table in the vllm_blocks manager (sim/vllm.py): the chained hashes of
its full prompt blocks (vLLM's block_hashes) and what it holds of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvbench.sim.request import SimRequest

if TYPE_CHECKING:
    from kvbench.sim.blocks import Run


@dataclass(slots=True)
class BlockTable:
    chain: list[int]  # hash of each full prompt block, chained (a hit needs its prefix)
    full: int  # full prompt blocks that may be cached
    cached: int = 0  # chain[:cached] are referenced by the request
    tail: Run | None = None  # the pool's run that holds chain[cached - 1]
    plain: int = 0  # uncached blocks held (partial prompt block, output)
    extra: int = 0  # generated tokens to recompute after a preemption
    decode_left: int = -1  # decode steps still to run after a preemption (-1: none yet)
    scheduled: bool = False  # first scheduled (hits counted) already
    hit_blocks: list[int] = field(default_factory=list)
    ready_s: float = 0.0  # an asynchronous host load ends then
    starts_after_ready: int = 0  # steps started since the load ended
    # a refused admission's (device hit, host hit, hit units in the free queue, the run of
    # its last device unit) and the pool's change count after it (`BlockPool.changes`):
    # valid while that is unchanged
    retry: tuple[int, int, int, Run | None] = (0, 0, 0, None)
    retry_at: int = -1


def block_chain(req: SimRequest, unit_tokens: int) -> BlockTable:
    """Chained hashes of the request's full cache units of `unit_tokens` (a block, or a
    trace page of several blocks), from its page keys: a unit's identity is its
    predecessor's and the pages it spans (with its offset in the first), so equal prefixes
    give equal chains whatever the two sizes are."""
    page, keys = req.page_tokens, req.keys
    covered = min(req.input_tokens, len(keys) * page)
    full = covered // unit_tokens
    prev = 0
    if unit_tokens == page:
        return BlockTable([prev := hash((prev, key)) for key in keys[:full]], full)
    chain = []
    for i in range(full):
        a = i * unit_tokens
        first, last = a // page, (a + unit_tokens - 1) // page
        prev = hash((prev, keys[first], a - first * page, keys[last]))
        chain.append(prev)
    return BlockTable(chain, full)
