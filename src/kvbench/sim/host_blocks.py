"""The CPU tier of the vllm_blocks manager (sim/blocks.py): an LRU of cache units, as vLLM's
offloading connectors keep their CPU blocks (vllm/v1/kv_offload/abstract.py OffloadingManager
with its LRU policy: block hashes stored after they are computed; `lookup` finds the longest
stored run, a load `touch`es it).

An ordered set of unit hashes, oldest first: a store appends each new unit (a full tier
first evicts its oldest), one already stored only becomes the most recent, a load makes its
units the most recent. Stores come a chunk's units at a time (about ten) and most of the
tier turns over between two uses of a unit: a C-level ordered dict per unit beats keeping
runs of units here (tried: a lazily pruned queue of runs was slower), unlike the GPU pool."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from itertools import repeat

# Runs an iterator to its end in C: per-unit dict work as one `map` per run of units.
drain = deque(maxlen=0).extend


class HostTier:
    """The stored unit hashes (`lru`), least recently used first, at most `capacity`."""

    __slots__ = ("capacity", "lru")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.lru)

    def __iter__(self) -> Iterator[int]:
        return iter(self.lru)

    def store(self, hashes: list[int]) -> tuple[int, int]:
        """Store units (distinct), in order: (stored, evicted) units."""
        lru, capacity = self.lru, self.capacity
        n = len(hashes)
        if n <= capacity and lru.keys().isdisjoint(hashes):
            # the usual case, all new: the oldest make room first (none of these among them)
            evicted = len(lru) + n - capacity
            if evicted > 0:
                drain(map(lru.popitem, repeat(False, evicted)))
            else:
                evicted = 0
            for h in hashes:
                lru[h] = None
            return n, evicted
        move, pop = lru.move_to_end, lru.popitem
        if all(map(lru.__contains__, hashes)):  # all stored already (a load): made recent
            drain(map(move, hashes))
            return 0, 0
        stored = evicted = 0
        for h in hashes:
            if h in lru:
                move(h)
                continue
            if len(lru) >= capacity:
                pop(False)
                evicted += 1
            lru[h] = None
            stored += 1
        return stored, evicted
