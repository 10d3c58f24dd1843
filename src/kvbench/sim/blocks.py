"""vLLM's KV block pool: fixed-size blocks, a prefix cache of full blocks keyed by chained
block hashes, and a free-block queue that is the eviction order (vllm/v1/core/block_pool.py
BlockPool, vllm/v1/core/kv_cache_utils.py FreeKVCacheBlockQueue), with an optional CPU tier
as vLLM's offloading connectors keep it (host_blocks.py).

What it does, unit by unit, as vLLM 0.26 does it block by block:
- A block a request holds has a reference count; a cached block whose count drops to 0 joins
  the *tail* of the free queue (it stays cached, a hit can take it back: `touch`, as
  block_pool.touch removes it from the queue); allocation pops the *head*, evicting the
  popped block's hash (block_pool.get_new_blocks, _maybe_evict_cached_block). A request frees
  its blocks last block first (single_type_kv_cache_manager.free hands block_pool.free_blocks
  the reversed list), so a prompt's tail is evicted before its head.
- Blocks without a hash (partial, decode, duplicates) go to the head when freed; so all
  uncached free blocks are used before any cached one is evicted (`plain_free`).
- A hash hit needs every earlier block of the prompt hit (the chain; kv_cache_manager
  get_computed_blocks, find_longest_cache_hit).
- CPU tier: each newly cached block is stored (D2H, counted) unless already stored; a CPU hit
  (continuing the GPU chain) is loaded into fresh GPU blocks and touches the CPU copy.

How it keeps them: a request holds a prefix of its hash chain, so units that the same
requests hold form runs of consecutive units (`Run`, a node of the prefix tree, split where
holders differ, as the radix cache's nodes are): one reference count per run, and the free
queue holds whole runs with no reference, each standing for its units last first. A run's
descendants always reach the queue before it (their holders hold it too and free it after
them; a hit or a requeue takes a prefix), so eviction from the head only ever shortens a
childless run from its end, and the cached units of any chain are a prefix of it. A
request's blocks are thus referenced, freed, queued and evicted per run, not per block;
hashes map to runs in one dict for the prefix lookup."""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from itertools import repeat

from kvbench.errors import SimError
from kvbench.sim.host_blocks import HostTier, drain
from kvbench.sim.node import CacheCounters

# `match` scans a hit this long unit by unit before it bisects (most hits are short)
_SCAN = 8


class Run:
    """Cached units chain[lo:hi] of one hash chain, held by `refs` requests alike; `parent`
    is the run of the unit before `lo` (None at the chain's start), `children` the runs
    whose parent this is."""

    __slots__ = ("chain", "children", "hi", "lo", "parent", "refs")

    def __init__(self, chain: list[int], lo: int, hi: int, refs: int,
                 parent: Run | None) -> None:
        self.chain = chain
        self.lo = lo
        self.hi = hi
        self.refs = refs
        self.parent = parent
        self.children = 0


class BlockPool:
    def __init__(self, device_blocks: int, block_tokens: int, host_blocks: int = 0) -> None:
        if device_blocks < 1 or block_tokens < 1 or host_blocks < 0:
            raise SimError(f"block pool: {device_blocks} device blocks of {block_tokens} tokens, "
                           f"{host_blocks} host blocks; allowed: >= 1, >= 1, >= 0")
        self.capacity = device_blocks
        self.block_tokens = block_tokens
        self.host_blocks = host_blocks
        # The prefix cache keeps hashes per unit of `unit_blocks` consecutive blocks (1 =
        # per block, as vLLM). A trace names content per page; when a page spans several
        # blocks, a unit per page gives the same hits with fewer entries (`set_unit`).
        self.unit_blocks = 1
        self.unit_tokens = block_tokens
        self.host = HostTier(host_blocks)  # capacity in units (set_unit)
        self.host_capacity = host_blocks
        # cached unit hash -> its run, or a run split off below it (`_run_at`)
        self.where: dict[int, Run] = {}
        self.queue: OrderedDict[Run, None] = OrderedDict()  # runs with no holder, head first
        self.queued_units = 0
        # counts the calls that change what a prefix lookup finds or the free queue's order
        self.changes = 0
        self.plain_free = device_blocks
        self.counters = CacheCounters()
        self.preemptions = 0  # counted by the scheduler (vllm.py)
        # The host link (link.HostLink), set by the engine: stores queue on its D2H
        # direction. vLLM's connector keeps a block referenced until its store is done, so
        # a queued store is never lost; the queue shows as link time and utilisation.
        self.link = None
        self.sync_until_s = 0.0

    def set_unit(self, unit_blocks: int) -> None:
        """Cache hashes per `unit_blocks` blocks (before any use)."""
        if self.where or unit_blocks < 1:
            raise SimError(f"block pool unit: {unit_blocks} blocks, set before use, >= 1")
        self.unit_blocks = unit_blocks
        self.unit_tokens = unit_blocks * self.block_tokens
        self.host_capacity = self.host.capacity = self.host_blocks // unit_blocks

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.plain_free + self.queued_units * self.unit_blocks

    @property
    def host_used(self) -> int:
        return len(self.host) * self.unit_tokens

    @property
    def free_cached(self) -> list[int]:
        """The free queue's unit hashes, head (next evicted) first."""
        return [h for run in self.queue for h in reversed(run.chain[run.lo:run.hi])]

    def match(self, chain: list[int], limit: int) -> tuple[int, int]:
        """(device, host) blocks of the longest cached prefix of chain[:limit]: device
        first, then the host continues it. Changes nothing."""
        where, host = self.where, self.host.lru
        d = 0
        if limit > _SCAN and chain[_SCAN] in where:
            # a long hit: the cached units of a chain are a prefix of it (module doc), so
            # its end is found by bisection over chain[_SCAN + 1:limit], last unit first
            d = limit - bisect_left(chain[limit - 1:_SCAN:-1], True, key=where.__contains__)
        else:
            while d < limit and chain[d] in where:
                d += 1
        h = d
        if host:
            while h < limit and chain[h] in host:
                h += 1
        return d, h - d

    def free_units(self, chain: list[int], stop: int) -> int:
        """How many of the hit units chain[:stop] wait in the free queue (no reference):
        the deepest runs of the hit, as holders of a run hold its ancestors."""
        if not stop:
            return 0
        run, top, n = self._run_at(chain[stop - 1], stop - 1), stop, 0
        while run is not None and not run.refs:
            n += top - run.lo
            top = run.lo
            run = run.parent
        return n

    def _run_at(self, h: int, i: int) -> Run:
        """The run holding cached unit `h`, the chain's unit `i`."""
        run = self.where[h]
        while run.lo > i:  # the unit went to an upper part when its run was split
            run = run.parent
        return run

    def _split(self, run: Run, i: int) -> Run:
        """Cut `run` before unit i; returns the new upper part chain[lo:i] (`run` keeps the
        rest, its place in the queue and its children)."""
        upper = Run(run.chain, run.lo, i, run.refs, run.parent)
        upper.children = 1
        run.lo = i
        run.parent = upper
        return upper

    def _ending_at(self, chain: list[int], stop: int) -> Run:
        """The run of cached unit stop - 1, split so that it ends there."""
        run = self._run_at(chain[stop - 1], stop - 1)
        return self._split(run, stop) if run.hi > stop else run

    # -- allocation ------------------------------------------------------------------------
    def can_allocate(self, n: int) -> bool:
        return n <= self.plain_free + self.queued_units * self.unit_blocks

    def allocate(self, n: int) -> None:
        """Take `n` blocks for new content: uncached free blocks first, then the head of the
        free queue (its cached hashes evicted; a unit's spare blocks become plain). The
        caller checked `can_allocate`."""
        if n <= self.plain_free:
            self.plain_free -= n
            return
        n -= self.plain_free
        k = self.unit_blocks
        units = -(-n // k)
        self.plain_free = units * k - n
        self.changes += 1
        evicted = units * self.unit_tokens
        self.counters.device_evicted_tokens += evicted
        if not self.host_capacity:
            self.counters.dropped_tokens += evicted
        # the queue's head: each run gives its last units first
        queue, where = self.queue, self.where
        self.queued_units -= units
        while units:
            run = next(iter(queue))
            if run.children:
                raise SimError("internal: a free run is evicted before its descendants")
            take = run.hi - run.lo
            if take > units:
                take = units
            drain(map(where.pop, run.chain[run.hi - take:run.hi]))
            run.hi -= take
            units -= take
            if run.hi == run.lo:
                del queue[run]
                if run.parent is not None:
                    run.parent.children -= 1

    def touch(self, chain: list[int], stop: int) -> None:
        """A prefix hit takes blocks chain[:stop]: out of the free queue, one more ref."""
        if not stop:
            return
        self.changes += 1
        run: Run | None = self._ending_at(chain, stop)
        queue = self.queue
        while run is not None:
            if not run.refs:
                queue.pop(run, None)  # (not there if just split off a queued run)
                self.queued_units -= run.hi - run.lo
            run.refs += 1
            run = run.parent

    def untouch(self, chain: list[int], stop: int) -> None:
        """Undo `touch` (an admission that did not go ahead), restoring the queue order as
        a free would (last first)."""
        self.release(chain, stop, 0)

    def requeue(self, chain: list[int], stop: int) -> None:
        """What `touch(chain, stop)` and `untouch` of it do together (an admission that did
        not go ahead): the free units among them move to the queue's tail, last first."""
        if not stop:
            return
        run: Run | None = self._run_at(chain[stop - 1], stop - 1)
        if run.refs:
            return
        self.changes += 1
        if run.hi > stop:  # its units past the hit keep their place
            run = self._split(run, stop)
        queue = self.queue
        while run is not None and not run.refs:
            queue.pop(run, None)
            queue[run] = None
            run = run.parent

    def cache(self, chain: list[int], start: int, stop: int) -> None:
        """Blocks chain[start:stop], just allocated and computed (or loaded) by a request
        holding chain[:start], get their hashes (one ref each) and are stored to the host
        tier. A hash another request cached first is shared instead (its new block goes
        back to the pool: vLLM would keep the duplicate until the request ends, a block's
        worth of difference)."""
        if start >= stop:
            return
        self.changes += 1
        where = self.where
        parent = self._run_at(chain[start - 1], start - 1) if start else None
        new = chain[start:stop]
        if where.keys().isdisjoint(new):  # the usual case: all new
            self._grow(chain, start, stop, parent)
        else:
            new = self._share(chain, start, stop, parent)
        if new and self.host_capacity:
            stored, evicted = self.host.store(new)
            counters, unit = self.counters, self.unit_tokens
            if evicted:
                counters.host_evicted_tokens += evicted * unit
            counters.backup_tokens += stored * unit  # each queued on the link's D2H side
            if stored and self.link is not None:
                self.link.async_d2h(stored * unit)

    def _grow(self, chain: list[int], start: int, stop: int, parent: Run | None) -> Run:
        """New units chain[start:stop], held by one request, below its run `parent`: that
        run grows when the request is its only holder and nothing hangs below it."""
        if parent is not None and parent.chain is chain and parent.refs == 1 and (
                not parent.children and parent.hi == start):
            parent.hi = stop
            run = parent
        else:
            run = Run(chain, start, stop, 1, parent)
            if parent is not None:
                parent.children += 1
        self.where.update(zip(chain[start:stop], repeat(run)))
        return run

    def _share(self, chain: list[int], start: int, stop: int,
               parent: Run | None) -> list[int]:
        """`cache` when some of the units are cached already: those take one more ref (out
        of the free queue) and their new blocks go back to the pool; returns the new
        units' hashes."""
        where, queue = self.where, self.queue
        new: list[int] = []
        i = start
        while i < stop:
            if chain[i] in where:
                run = self._run_at(chain[i], i)
                if run.lo != i:
                    raise SimError("internal: a cached unit's predecessor is not its run's")
                j, end = i + 1, min(run.hi, stop)
                while j < end and run.chain[j] == chain[j]:
                    j += 1
                if run.hi > j:
                    run = self._split(run, j)
                if not run.refs:
                    queue.pop(run, None)
                    self.queued_units -= run.hi - run.lo
                run.refs += 1
                self.plain_free += (j - i) * self.unit_blocks
            else:
                j = i + 1
                while j < stop and chain[j] not in where:
                    j += 1
                run = self._grow(chain, i, j, parent)
                new += chain[i:j]
            parent, i = run, j
        return new

    def release(self, chain: list[int], cached: int, plain: int) -> None:
        """Free a request's blocks, last first: `plain` uncached blocks (its tail) to the
        head of the queue, then its cached units chain[:cached] in reverse to the tail."""
        self.plain_free += plain
        if not cached:
            return
        self.changes += 1
        run: Run | None = self._run_at(chain[cached - 1], cached - 1)
        queue = self.queue
        while run is not None:
            run.refs -= 1
            if not run.refs:
                queue[run] = None
                self.queued_units += run.hi - run.lo
            run = run.parent

    def load(self, chain: list[int], start: int, stop: int) -> None:
        """Host hits chain[start:stop] are loaded into GPU blocks (allocated by the caller,
        which `cache`d them: storing units the host has makes them its most recent, which
        is the load's touch of the host copies)."""
        self.counters.load_tokens += (stop - start) * self.unit_tokens
