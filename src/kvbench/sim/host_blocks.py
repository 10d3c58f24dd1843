"""The CPU tier of the vllm_blocks manager (sim/blocks.py): an LRU of cache units, as vLLM's
offloading connectors keep their CPU blocks (vllm/v1/kv_offload/abstract.py OffloadingManager
with its LRU policy: block hashes stored after they are computed; `lookup` finds the longest
stored run, a load `touch`es it).

The LRU order, oldest first: a store appends each new unit (a full tier first evicts its
oldest), one already stored only becomes the most recent, a load makes its units the most
recent. Units are stored a chunk at a time and loaded a run at a time, so the order is kept
as segments, one per store or load, oldest first, with an index from each stored hash to
its segment: a unit that becomes recent again joins a new segment and its old entry goes
stale (it is skipped when that segment is evicted). Stores, loads and evictions of whole
runs are then a few C-level bulk operations instead of an ordered-dict operation per unit
(which made the vllm profile's offload arm 3.4x the sglang profile's time in closed-loop
lanes, issue 38); the order, the counts and what a lookup finds are the per-unit LRU's
(tests/sim/test_vllm_pool_model.py checks them against an ordered dict per unit)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import islice, repeat

# Runs an iterator to its end in C: per-unit dict work as one `map` per run of units.
drain = deque(maxlen=0).extend

_HASHES, _POS, _MOVED = 0, 1, 2  # a segment: [its hashes in store order, first not evicted,
# how many of them became recent again elsewhere]


class HostTier:
    """The stored unit hashes (`index`: hash -> segment), at most `capacity`."""

    __slots__ = ("capacity", "index", "live", "segments")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.index: dict[int, list] = {}
        self.segments: deque[list] = deque()
        self.live = 0

    def __len__(self) -> int:
        return self.live

    def __contains__(self, h: int) -> bool:
        return h in self.index

    def __iter__(self) -> Iterator[int]:
        """The stored hashes, least recently used first."""
        index = self.index
        for seg in self.segments:
            for h in islice(seg[_HASHES], seg[_POS], None):
                if index.get(h) is seg:
                    yield h

    def store(self, hashes: list[int]) -> tuple[int, int]:
        """Store units (distinct), in order: (stored, evicted) units."""
        index, capacity = self.index, self.capacity
        n = len(hashes)
        if index.keys().isdisjoint(hashes):
            # the usual case, all new: in as one segment, then the oldest out (the same as
            # each making room in turn: the new are the most recent)
            seg = [hashes, 0, 0]
            self.segments.append(seg)
            index.update(zip(hashes, repeat(seg)))
            self.live += n
            return n, self._evict(self.live - capacity)
        if all(map(index.__contains__, hashes)):  # all stored already (a load): made recent
            self._recent(hashes)
            return 0, 0
        stored = evicted = 0
        for h in hashes:  # mixed: unit by unit, as the order of making room matters
            if h in index:
                self._recent([h])
                continue
            if self.live >= capacity:
                evicted += self._evict(1)
            seg = [[h], 0, 0]
            self.segments.append(seg)
            index[h] = seg
            self.live += 1
            stored += 1
        return stored, evicted

    def _recent(self, hashes: list[int]) -> None:
        """Stored units become the most recent, in this order."""
        index = self.index
        for h in hashes:
            index[h][_MOVED] += 1
        seg = [hashes, 0, 0]
        self.segments.append(seg)
        index.update(zip(hashes, repeat(seg)))

    def _evict(self, k: int) -> int:
        """The `k` least recently used units out; returns how many went."""
        if k <= 0:
            return 0
        index, segments = self.index, self.segments
        gone = 0
        while gone < k and segments:
            seg = segments[0]
            if seg[_MOVED]:  # drop the stale entries once: the rest is live, in order
                get = index.get
                seg[_HASHES] = [h for h in islice(seg[_HASHES], seg[_POS], None)
                                if get(h) is seg]
                seg[_POS] = seg[_MOVED] = 0
            hashes, pos = seg[_HASHES], seg[_POS]
            take = min(k - gone, len(hashes) - pos)
            drain(map(index.__delitem__, islice(hashes, pos, pos + take)))
            gone += take
            pos += take
            if pos >= len(hashes):
                segments.popleft()
            else:
                seg[_POS] = pos
        self.live -= gone
        return gone
