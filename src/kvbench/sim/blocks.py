"""vLLM's KV block pool: fixed-size blocks, a prefix cache of full blocks keyed by chained
block hashes, and a free-block queue that is the eviction order (vLLM v1
core/block_pool.py, kv_cache_utils.FreeKVCacheBlockQueue), with an optional CPU tier as
vLLM's offloading connectors keep it (an LRU of blocks stored after they are computed).

- A block a request holds has a reference count; a cached block whose count drops to 0
  joins the *tail* of the free queue (it stays cached, a hit can take it back: `touch`
  removes it from the queue); allocation pops the *head*, evicting the popped block's hash.
  A request frees its blocks last block first, so a prompt's tail is evicted before its head.
- Blocks without a hash (partial, decode, duplicates) go to the head when freed; so all
  uncached free blocks are used before any cached one is evicted (`plain_free`).
- A hash hit needs every earlier block of the prompt hit (the chain): an evicted early block
  makes the later cached ones unreachable until they are popped.
- CPU tier: each newly cached block is stored (D2H, counted) unless already stored; a full
  CPU tier evicts its least recently used block; a CPU hit (continuing the GPU chain) is
  loaded into fresh GPU blocks and touches the CPU copy."""

from __future__ import annotations

from collections import OrderedDict

from kvbench.errors import SimError
from kvbench.sim.node import CacheCounters


class BlockPool:
    def __init__(self, device_blocks: int, block_tokens: int, host_blocks: int = 0) -> None:
        if device_blocks < 1 or block_tokens < 1 or host_blocks < 0:
            raise SimError(f"block pool: {device_blocks} device blocks of {block_tokens} tokens, "
                           f"{host_blocks} host blocks; allowed: >= 1, >= 1, >= 0")
        self.capacity = device_blocks
        self.block_tokens = block_tokens
        self.host_blocks = host_blocks
        self.host_capacity = host_blocks  # in units (below)
        # The prefix cache keeps hashes per unit of `unit_blocks` consecutive blocks (1 =
        # per block, as vLLM). A trace names content per page; when a page spans several
        # blocks, a unit per page gives the same hits with fewer entries (`set_unit`).
        self.unit_blocks = 1
        self.unit_tokens = block_tokens
        self.refs: dict[int, int] = {}  # cached block hash -> reference count
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # eviction order, oldest first
        self.plain_free = device_blocks
        self.host: OrderedDict[int, None] = OrderedDict()  # LRU, oldest first
        self.counters = CacheCounters()
        self.preemptions = 0  # counted by the scheduler (vllm.py)
        # The host link (link.HostLink), set by the engine: stores queue on its D2H
        # direction. vLLM's connector keeps a block referenced until its store is done, so
        # a queued store is never lost; the queue shows as link time and utilisation.
        self.link = None
        self.sync_until_s = 0.0

    def set_unit(self, unit_blocks: int) -> None:
        """Cache hashes per `unit_blocks` blocks (before any use)."""
        if self.refs or unit_blocks < 1:
            raise SimError(f"block pool unit: {unit_blocks} blocks, set before use, >= 1")
        self.unit_blocks = unit_blocks
        self.unit_tokens = unit_blocks * self.block_tokens
        self.host_capacity = self.host_blocks // unit_blocks

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.plain_free + len(self.free_cached) * self.unit_blocks

    @property
    def host_used(self) -> int:
        return len(self.host) * self.unit_tokens

    def match(self, chain: list[int], limit: int) -> tuple[int, int]:
        """(device, host) blocks of the longest cached prefix of chain[:limit]: device
        first, then the host continues it. Changes nothing."""
        refs, host = self.refs, self.host
        d = 0
        while d < limit and chain[d] in refs:
            d += 1
        h = d
        if host:
            while h < limit and chain[h] in host:
                h += 1
        return d, h - d

    # -- allocation ------------------------------------------------------------------------
    def can_allocate(self, n: int) -> bool:
        return n <= self.plain_free + len(self.free_cached) * self.unit_blocks

    def allocate(self, n: int) -> None:
        """Take `n` blocks for new content: uncached free blocks first, then the head of the
        free queue (its cached hashes evicted; a unit's spare blocks become plain). The
        caller checked `can_allocate`."""
        take = min(n, self.plain_free)
        self.plain_free -= take
        n -= take
        if n:
            k = self.unit_blocks
            units = -(-n // k)
            pop, refs = self.free_cached.popitem, self.refs
            for _ in range(units):
                del refs[pop(False)[0]]
            self.plain_free += units * k - n
            self.counters.device_evicted_tokens += units * self.unit_tokens
            if not self.host_capacity:
                self.counters.dropped_tokens += units * self.unit_tokens

    def touch(self, chain: list[int], start: int, stop: int) -> None:
        """A prefix hit takes blocks chain[start:stop]: out of the free queue, one more ref."""
        refs, free = self.refs, self.free_cached
        for h in chain[start:stop]:
            r = refs[h]
            if r == 0:
                del free[h]
            refs[h] = r + 1

    def cache(self, chain: list[int], start: int, stop: int) -> None:
        """Blocks chain[start:stop], just allocated and computed (or loaded), get their
        hashes (one ref each) and are stored to the host tier. A hash another request
        cached first is shared instead (its new block goes back to the pool: vLLM would
        keep the duplicate until the request ends, a block's worth of difference)."""
        refs, free = self.refs, self.free_cached
        get = refs.get
        new: list[int] = []
        shared = 0
        for h in chain[start:stop]:
            r = get(h)
            if r is None:
                refs[h] = 1
                new.append(h)
                continue
            if r == 0:
                del free[h]
            refs[h] = r + 1
            shared += 1
        if shared:
            self.plain_free += shared * self.unit_blocks
        if new and self.host_capacity:
            self._store(new)

    def release(self, chain: list[int], cached: int, plain: int) -> None:
        """Free a request's blocks, last first: `plain` uncached blocks (its tail) to the
        head of the queue, then its cached units chain[:cached] in reverse to the tail."""
        self.plain_free += plain
        refs, free = self.refs, self.free_cached
        for h in reversed(chain[:cached]):
            r = refs[h] - 1
            refs[h] = r
            if r == 0:
                free[h] = None

    def free_units(self, chain: list[int], stop: int) -> int:
        """How many of the hit units chain[:stop] wait in the free queue (no reference)."""
        return list(map(self.refs.__getitem__, chain[:stop])).count(0)

    def requeue(self, chain: list[int], stop: int) -> None:
        """What `touch(chain, 0, stop)` and `untouch` of it do together (an admission that
        did not go ahead): the free units among them move to the queue's tail, last first."""
        refs, move = self.refs, self.free_cached.move_to_end
        for h in reversed(chain[:stop]):
            if not refs[h]:
                move(h)

    def untouch(self, chain: list[int], start: int, stop: int) -> None:
        """Undo `touch` (an admission that did not go ahead), restoring the queue order as
        a free would (last first)."""
        self.release(chain[start:stop], stop - start, 0)

    # -- host tier -------------------------------------------------------------------------
    def _store(self, hashes: list[int]) -> None:
        """Copy newly cached units (distinct) to the host, in order: one the host has
        already only becomes its most recent; a full host evicts its least recently used."""
        host, capacity = self.host, self.host_capacity
        move, pop = host.move_to_end, host.popitem
        stored = evicted = 0
        for h in hashes:
            if h in host:
                move(h)
                continue
            if len(host) >= capacity:
                pop(False)
                evicted += 1
            host[h] = None
            stored += 1
        counters, unit = self.counters, self.unit_tokens
        if evicted:
            counters.host_evicted_tokens += evicted * unit
        counters.backup_tokens += stored * unit
        if stored and self.link is not None:
            self.link.async_d2h(stored * unit)

    def load(self, chain: list[int], start: int, stop: int) -> None:
        """Host hits chain[start:stop] are loaded into GPU blocks (allocated by the caller)
        and touched on the host."""
        move = self.host.move_to_end
        for h in chain[start:stop]:
            move(h)
        self.counters.load_tokens += (stop - start) * self.unit_tokens
