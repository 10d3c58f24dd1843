"""A request's block table in the vllm_blocks manager (sim/vllm.py): the chained hashes of
its full prompt blocks (vLLM's block_hashes) and what it holds of them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvbench.sim.request import SimRequest
from kvbench.workload.blocks import common_prefix

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


def block_chain(req: SimRequest, unit_tokens: int, chain: list[int] | None = None
                ) -> BlockTable:
    """Chained hashes of the request's full cache units of `unit_tokens` (a block, or a
    trace page of several blocks), from its page keys: a unit's identity is its
    predecessor's and the pages it spans (with its offset in the first), so equal prefixes
    give equal chains whatever the two sizes are. `chain`: the hashes of the first units,
    known already (`ChainCache`); the rest are computed."""
    page, keys = req.page_tokens, req.keys
    covered = min(req.input_tokens, len(keys) * page)
    full = covered // unit_tokens
    chain = [] if chain is None else chain[:full]
    start = len(chain)
    prev = chain[-1] if chain else 0
    if unit_tokens == page:
        chain += [prev := hash((prev, key)) for key in keys[start:full]]
        return BlockTable(chain, full)
    for i in range(start, full):
        a = i * unit_tokens
        first, last = a // page, (a + unit_tokens - 1) // page
        prev = hash((prev, keys[first], a - first * page, keys[last]))
        chain.append(prev)
    return BlockTable(chain, full)


class ChainCache:
    """The chains of recent prompts by their first page key. An agent's next turn is its
    previous prompt plus the new turn, so its chain is that one's for the pages they share
    and new only after: rebuilding each request's whole chain was 66% of the vllm profile's
    time in closed-loop lanes (issue 38). A hit is checked (the shared pages are compared),
    never assumed, and the chain is a copy (the pool's runs hold the lists they index)."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.entries: OrderedDict[Hashable, tuple[list, list[int]]] = OrderedDict()

    def table(self, req: SimRequest, unit_tokens: int) -> BlockTable:
        keys = req.keys
        if not keys:
            return block_chain(req, unit_tokens)
        known = None
        got = self.entries.get(keys[0])
        if got is not None:
            old_keys, old_chain = got
            shared = common_prefix(old_keys, keys) * req.page_tokens // unit_tokens
            known = old_chain[:shared]
        table = block_chain(req, unit_tokens, known)
        entries = self.entries
        entries[keys[0]] = (keys, table.chain)
        entries.move_to_end(keys[0])
        if len(entries) > self.size:
            entries.popitem(last=False)
        return table
