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
- A store is asynchronous, but a block whose store is still in flight cannot be given to new
  content: vLLM 0.26's OffloadingConnector flushes the pending store jobs of re-allocated
  blocks before the step runs (distributed/kv_transfer/kv_connector/v1/offloading/
  scheduler.py build_connector_meta "Flush jobs that contain re-allocated blocks", worker.py
  handle_preemptions `self.worker.wait(jobs_to_flush)`), and SimpleCPUOffloadConnector keeps
  such blocks referenced until stored (simple_kv_offload/manager.py: "Touch GPU blocks to
  prevent eviction during async copy"). Either way the allocation waits for the store: an
  eviction of units whose store ends later puts that wait on the step (`sync_until_s`).
- Lazy offload (SimpleCPUOffloadConnector `lazy_offload`, simple_kv_offload/manager.py
  `_prepare_lazy_store_specs`): nothing is stored when computed; each step stores the cached
  blocks among the `lazy_target` blocks next to be evicted (the head of the free queue,
  `_estimate_lazy_target_blocks`: twice a step's token budget in blocks) that the CPU does
  not hold; a block evicted before it came that near is lost, not stored.

How it keeps them: a request holds a prefix of its hash chain, so units that the same
requests hold form runs of consecutive units (`Run`, a node of the prefix tree, split where
holders differ, as the radix cache's nodes are): one reference count per run, and the free
queue holds whole runs with no reference, each standing for its units last first. A run's
descendants always reach the queue before it (their holders hold it too and free it after
them; a hit or a requeue takes a prefix), so eviction from the head only ever shortens a
childless run from its end, and the cached units of any chain are a prefix of it: the
prefix lookup walks the tree run by run. A request holds the run of its last cached unit
(`BlockTable.tail`), and its blocks are referenced, freed, queued and evicted per run, not
per block."""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice, takewhile

from kvbench.errors import SimError
from kvbench.sim.host_blocks import HostTier
from kvbench.sim.node import CacheCounters


class Run:
    """Cached units chain[lo:hi] of one hash chain, held by `refs` requests alike: a node of
    the prefix tree. `parent` holds the unit before `lo` (None at the chain's start);
    `kids` are the runs that continue it, by their first unit's hash (None: none yet)."""

    __slots__ = ("chain", "done_s", "hi", "kids", "lo", "parent", "refs")

    def __init__(self, chain: list[int], lo: int, hi: int, refs: int,
                 parent: Run | None) -> None:
        self.chain = chain
        self.lo = lo
        self.hi = hi
        self.refs = refs
        self.parent = parent
        self.kids: dict[int, Run] | None = None
        # when the last store of its units ends (their D2H copies queue in store order, so
        # its other units' end sooner; a part split off keeps it, an upper bound)
        self.done_s = 0.0


def _parting(a: list[int], b: list[int], i: int, end: int) -> int:
    """The first unit in [i, end) where chains a and b differ (end if none), given a[i] ==
    b[i]: chained hashes agree up to a point and differ from there on."""
    if a is b or a[end - 1] == b[end - 1]:
        return end
    lo, hi = i + 1, end - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] == b[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


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
        self.roots: dict[int, Run] = {}  # the runs at a chain's start, by first hash
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
        # lazy offload: blocks / units next to be evicted that are stored each step (None:
        # eager, each unit stored when computed)
        self.lazy_target_blocks: int | None = None
        self.lazy_target: int | None = None

    def set_unit(self, unit_blocks: int) -> None:
        """Cache hashes per `unit_blocks` blocks (before any use)."""
        if self.roots or unit_blocks < 1:
            raise SimError(f"block pool unit: {unit_blocks} blocks, set before use, >= 1")
        self.unit_blocks = unit_blocks
        self.unit_tokens = unit_blocks * self.block_tokens
        self.host_capacity = self.host.capacity = self.host_blocks // unit_blocks
        if self.lazy_target_blocks is not None:
            self.lazy_target = -(-self.lazy_target_blocks // unit_blocks)

    def close(self) -> None:
        """Drop the runs' parent links once the run is over (as `TieredCache.close`)."""
        stack = list(self.roots.values())
        while stack:
            run = stack.pop()
            run.parent = None
            if run.kids:
                stack.extend(run.kids.values())

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
        """(device, host) blocks of the longest cached prefix of chain[:limit]."""
        return self.lookup(chain, limit)[:2]

    def lookup(self, chain: list[int], limit: int) -> tuple[int, int, Run | None]:
        """(device, host, run): the longest cached prefix of chain[:limit], device units
        first, then the host's that continue it, and the run holding the last device unit
        (None: no device hit). Changes nothing."""
        d, run = 0, None
        kid = self.roots.get(chain[0]) if limit else None
        while kid is not None:  # its first unit is chain[d]
            end = kid.hi if kid.hi < limit else limit
            run, other = kid, kid.chain
            # `_parting`'s usual answer (the run's units all in the chain) without the call:
            # a long prompt's lookup walks many runs
            d = end if other is chain or other[end - 1] == chain[end - 1] else _parting(
                other, chain, d, end)
            if d < kid.hi or d == limit or not kid.kids:
                break
            kid = kid.kids.get(chain[d])
        host = self.host.index
        if host and d < limit and chain[d] in host:  # (not a prefix: unit by unit, in C)
            return d, len(list(takewhile(host.__contains__, islice(chain, d, limit)))), run
        return d, 0, run

    def free_units(self, run: Run | None, stop: int) -> int:
        """How many of a hit's units, chain[:stop] with its last in `run`, wait in the free
        queue (no reference): its deepest runs, as holders of a run hold its ancestors."""
        top, n = stop, 0
        while run is not None and not run.refs:
            n += top - run.lo
            top = run.lo
            run = run.parent
        return n

    def _kids_of(self, run: Run | None) -> dict[int, Run]:
        """The dict that holds the runs below `run` (the roots below None), made if new."""
        if run is None:
            return self.roots
        if run.kids is None:
            run.kids = {}
        return run.kids

    def _split(self, run: Run, i: int) -> Run:
        """Cut `run` before unit i; returns the new upper part chain[lo:i] (`run` keeps the
        rest, its place in the queue and its kids)."""
        upper = Run(run.chain, run.lo, i, run.refs, run.parent)
        upper.done_s = run.done_s
        self._kids_of(run.parent)[run.chain[run.lo]] = upper
        upper.kids = {run.chain[i]: run}
        run.lo = i
        run.parent = upper
        return upper

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
        queue = self.queue
        self.queued_units -= units
        wait = 0.0
        while units:
            run = next(iter(queue))
            if run.kids:
                raise SimError("internal: a free run is evicted before its descendants")
            take = run.hi - run.lo
            if take > units:
                take = units
            if run.done_s > wait:
                wait = run.done_s
            run.hi -= take
            units -= take
            if run.hi == run.lo:
                del queue[run]
                del self._kids_of(run.parent)[run.chain[run.lo]]
        if wait > self.sync_until_s:  # new content waits for those blocks' stores
            self.sync_until_s = wait

    def touch(self, run: Run | None, stop: int) -> Run | None:
        """A prefix hit takes blocks chain[:stop], the last in `run`: out of the free queue,
        one more ref. Returns the run that ends at stop (split off when `run` goes on)."""
        if run is None:
            return None
        self.changes += 1
        if run.hi > stop:
            run = self._split(run, stop)
        tail, queue = run, self.queue
        while run is not None:
            if not run.refs:
                queue.pop(run, None)  # (not there if just split off a queued run)
                self.queued_units -= run.hi - run.lo
            run.refs += 1
            run = run.parent
        return tail

    def requeue(self, run: Run | None, stop: int) -> Run | None:
        """What `touch(run, stop)` and a `release` of it do together (an admission that did
        not go ahead): the free units among chain[:stop] move to the queue's tail, last
        first. Returns the run that now holds unit stop - 1."""
        if run is None or run.refs:
            return run
        self.changes += 1
        if run.hi > stop:  # its units past the hit keep their place
            run = self._split(run, stop)
        tail, queue = run, self.queue
        while run is not None and not run.refs:
            queue.pop(run, None)
            queue[run] = None
            run = run.parent
        return tail

    def cache(self, tail: Run | None, chain: list[int], start: int, stop: int) -> Run | None:
        """Blocks chain[start:stop], just allocated and computed (or loaded) by a request
        whose cached units chain[:start] end in run `tail`, get their hashes (one ref each)
        and are stored to the host tier; returns the request's new tail. A hash another
        request cached first is shared instead (its new block goes back to the pool: vLLM
        would keep the duplicate until the request ends, a block's worth of difference)."""
        if start >= stop:
            return tail
        self.changes += 1
        kids = self.roots if tail is None else tail.kids
        store = self.host_capacity and self.lazy_target is None
        if kids and chain[start] in kids:
            tail, new = self._share(chain, start, stop, tail)
            if new and store:
                self._store(tail, new)
        else:  # the usual case: none of it cached (a chain's cached units are a prefix)
            tail = self._grow(chain, start, stop, tail)
            if store:
                self._store(tail, chain[start:stop])
        return tail

    def _store(self, run: Run, hashes: list[int]) -> None:
        """Store units of `run` to the CPU tier (those it holds already become recent)."""
        stored, evicted = self.host.store(hashes)
        counters, unit = self.counters, self.unit_tokens
        if evicted:
            counters.host_evicted_tokens += evicted * unit
        counters.backup_tokens += stored * unit  # each queued on the link's D2H side
        if stored and self.link is not None:
            done = self.link.async_d2h(stored * unit)
            if done > run.done_s:
                run.done_s = done

    def lazy_store(self) -> None:
        """Lazy offload, once a step: store the cached units among the `lazy_target` next
        to be evicted (the free queue's head, each run's last units first) that the CPU
        tier does not hold."""
        left, host = self.lazy_target, self.host.index
        if not left or not self.host_capacity:
            return
        for run in self.queue:
            n = run.hi - run.lo
            lo = run.hi - left if n > left else run.lo
            units = run.chain[lo:run.hi]
            if not all(map(host.__contains__, units)):
                self._store(run, [h for h in reversed(units) if h not in host])
            left -= run.hi - lo
            if left <= 0:
                break

    def _grow(self, chain: list[int], start: int, stop: int, parent: Run | None) -> Run:
        """New units chain[start:stop], held by one request, below its run `parent`: that
        run grows when the request is its only holder and nothing hangs below it."""
        if parent is not None and parent.chain is chain and parent.refs == 1 and (
                not parent.kids):
            parent.hi = stop
            return parent
        run = Run(chain, start, stop, 1, parent)
        self._kids_of(parent)[chain[start]] = run
        return run

    def _share(self, chain: list[int], start: int, stop: int,
               parent: Run | None) -> tuple[Run, list[int]]:
        """`cache` when its first units are cached already: those take one more ref (out of
        the free queue) and their new blocks go back to the pool. Returns the new tail and
        the hashes of the units that were new."""
        i = start
        while i < stop:
            kids = self.roots if parent is None else parent.kids
            run = kids.get(chain[i]) if kids else None
            if run is None:
                return self._grow(chain, i, stop, parent), chain[i:stop]
            j = _parting(run.chain, chain, i, run.hi if run.hi < stop else stop)
            if run.hi > j:
                run = self._split(run, j)
            if not run.refs:
                self.queue.pop(run, None)
                self.queued_units -= run.hi - run.lo
            run.refs += 1
            self.plain_free += (j - i) * self.unit_blocks
            parent, i = run, j
        return parent, []

    def release(self, tail: Run | None, plain: int) -> None:
        """Free a request's blocks, last first: `plain` uncached blocks to the head of the
        queue, then its cached units, ending in run `tail`, in reverse to the tail."""
        self.plain_free += plain
        if tail is None:
            return
        self.changes += 1
        run: Run | None = tail
        queue = self.queue
        while run is not None:
            run.refs -= 1
            if not run.refs:
                queue[run] = None
                self.queued_units += run.hi - run.lo
            run = run.parent

    def load(self, units: int) -> None:
        """Host hits are loaded into GPU blocks (allocated by the caller, which `cache`d
        them: storing units the host has makes them its most recent, which is the load's
        touch of the host copies)."""
        self.counters.load_tokens += units * self.unit_tokens
