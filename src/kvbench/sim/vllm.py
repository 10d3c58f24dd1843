"""vLLM's scheduler over its block pool (`blocks.py`), in the same virtual-time engine: the
`vllm_blocks` KV manager of the `vllm` engine profile. From vLLM v1 core/sched/scheduler.py
and core/kv_cache_manager.py:

- One token budget per step (max_num_batched_tokens) covers decode tokens and prefill
  chunks. Running requests are served first, oldest first; then waiting ones, FCFS, while
  the budget, the running cap and the free blocks allow (no waiting request is scheduled in
  a step that preempted).
- Blocks are allocated as a request advances (`allocate_slots` per chunk), not for the
  whole prompt up front: a long prompt starts with one chunk's blocks, so many partially
  prefilled requests hold blocks at once. The chunk that ends the prefill also takes the
  blocks of the output (vLLM takes them one step at a time; outputs are short here).
- When a running request's next chunk cannot get its blocks, the newest running request is
  preempted (recompute): its blocks are freed (cached ones stay cached, at the free queue's
  tail), it goes back to the head of the waiting queue and recomputes from what the prefix
  cache still holds. A request's cached tokens are those found when it was first scheduled
  (vLLM's num_cached_tokens), so recomputation after preemption never counts as a hit.
- Full prompt blocks are cached (hashed) once scheduled for compute; a hit takes the
  longest chain of cached blocks, at most prompt - 1 tokens (the last token is computed).
- `admit_full_prompt` (vLLM 0.26's scheduler_reserve_full_isl): a waiting request is
  admitted only when the free blocks hold its whole prompt, not just its first chunk.
- With a host tier (Offloading- / SimpleCPUOffloadConnector, eager): newly cached blocks are
  stored to CPU; a CPU hit continuing the GPU chain is loaded into new GPU blocks. With
  `load_ready_steps` >= 0 (vLLM 0.26, WAITING_FOR_REMOTE_KVS) the request first takes blocks
  for its hit only (beside what the prefilling requests still need) and computes nothing;
  its load queues on the H2D link; it is scheduled for the rest of its prompt, ahead of the
  waiting queue, once that many steps have started after the load ended (a poll per step,
  asynchronous scheduling: engines/vllm.yaml); resuming it costs the engine `load_stall_s` of
  host work, of which what outlasts the step before stalls the step that resumes it (every
  request in it). Else the load overlaps its first chunk's step."""

from __future__ import annotations

from kvbench.errors import SimError
from kvbench.sim.block_table import BlockTable, ChainCache, block_chain
from kvbench.sim.blocks import BlockPool
from kvbench.sim.context import context_error
from kvbench.sim.engine import Engine, _Step
from kvbench.sim.request import SimRequest


class VllmEngine(Engine):
    """`Engine` with vLLM's scheduling over a `BlockPool` (passed as the cache)."""

    def __init__(self, cache: BlockPool, costs, config=None, on_finish=None,
                 on_arrival=None) -> None:
        super().__init__(cache, costs, config, on_finish, on_arrival)  # type: ignore[arg-type]
        self.pool = cache
        self.B = cache.block_tokens
        self.U = 0  # tokens per cache unit, set by the first request (`_unit`)
        self.running: dict[SimRequest, None] = {}  # scheduling order: preempt from the end
        # Host loads in flight or done but not yet scheduled, in issue order. They hold
        # blocks and count in num_running (so the engine is not idle) but not towards the
        # running cap, and are never preempted (vLLM keeps them out of `running`).
        self.loading: list[SimRequest] = []
        self._preempted_now = False
        self._chains = ChainCache()
        self._prev_step_s = 0.0  # the last composed step's time, one step of a stretch

    # -- composing a step ------------------------------------------------------------------
    def _compose(self, horizon_s: float) -> _Step | None:
        cfg, costs = self.config, self.costs
        self.link.now_s = now = self.now_s
        pool = self.pool
        pool.sync_until_s = now
        if pool.lazy_target is not None:
            pool.lazy_store()
        budget = cfg.chunked_prefill_tokens - self.decode_batch * costs.verify_tokens
        chunks: list[tuple[SimRequest, int]] = []
        load_tokens = resumed = 0
        preempted = blocked = False
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req not in self.running:
                continue  # preempted by an earlier request of this loop
            n = req.prefill_left if req.prefill_left < budget else budget
            if not self._grow(req, n):
                preempted = True
                break  # it preempted itself: nothing newer is left to serve
            preempted = preempted or self._preempted_now
            chunks.append((req, n))
            budget -= n
        if not preempted:
            for req in list(self.loading):  # vLLM's skipped-waiting queue comes first
                if budget <= 0:
                    break
                if req.blocks.starts_after_ready < costs.load_ready_steps:
                    continue  # its load is not known to be done yet
                n = self._resume(req, budget)
                if n is None:
                    blocked = True
                    break
                chunks.append((req, n))
                budget -= n
                resumed += 1
            while not blocked and self.waiting and budget > 0 and (
                    self.num_running - len(self.loading) < cfg.max_running_requests):
                req = self.waiting[0]
                if req.blocks is None:  # new: refused when over the context or the pool
                    if self._refused_context(req):
                        continue
                    if self._blocks_total(req) > self.pool.capacity:
                        self.waiting.popleft()
                        self._reject(req, context_error(
                            self.pool.capacity * self.B, req.input_tokens, req.output_tokens,
                            " (more KV blocks than the GPU pool holds)"))
                        continue
                got = self._schedule_waiting(req, budget)
                if got is None:
                    break
                n, loaded = got
                self.waiting.popleft()
                if n:
                    load_tokens += loaded
                    chunks.append((req, n))
                    budget -= n
        if self.loading:  # a decode stretch ends when a load does, then steps one by one
            first = min(r.blocks.ready_s for r in self.loading)
            horizon_s = min(horizon_s, max(first, now))
        # allocations that took blocks whose stores were in flight wait for them first; a
        # request resumed after its host load costs the engine load_stall_s of host work,
        # done while the step before runs (asynchronous scheduling: the next step is
        # composed while one is in flight), so only what outlasts that step stalls this one
        stall = resumed * costs.load_stall_s - self._prev_step_s
        wait_s = pool.sync_until_s - now + (stall if stall > 0 else 0.0)
        step = self._step_for(chunks, load_tokens, 0, wait_s, horizon_s)
        if step is None and self.loading:
            if blocked and self.num_running == len(self.loading):
                # Loaded requests hold the pool between them and none can go on: the newest
                # gives its blocks back (they stay cached) and waits again, as vLLM preempts
                # its newest request when blocks run short. The reservation above keeps
                # this from arising; this keeps a run from ever stopping on it.
                self._preempt_loading(self.loading[-1])
                return self._compose(horizon_s)
            # nothing to compute: vLLM runs connector-only steps until the loads are done
            later = [r.blocks.ready_s for r in self.loading if r.blocks.ready_s > now]
            step = _Step(now, max(now + costs.step_overhead_s, min(later, default=now)), [], 0)
        for req in self.loading:
            if now >= req.blocks.ready_s:
                req.blocks.starts_after_ready += 1
        if step is not None:  # one step's time (a decode stretch runs several)
            self._prev_step_s = (step.end_s - step.start_s) / (
                step.decode_steps if not step.chunks and step.decode_steps > 1 else 1)
            if not self.loading and pool.lazy_target is None and self._stretchable(step):
                return self._plan_stretch(step)
        return step

    def _plan_stretch(self, step: _Step) -> _Step:
        """`Engine._plan_stretch` where each step's chunk takes its blocks, caches its units
        and stores them (host tier), as `_compose` does at the step's start; the stretch
        stops before a step whose blocks are not free without preempting."""
        req, n = step.chunks[0]
        pool, link, costs = self.pool, self.link, self.costs
        decode_context = self._decode_context()
        b: BlockTable = req.blocks
        now0, context0, left0 = self.now_s, req.context_tokens, req.prefill_left
        ends = [step.end_s]
        req.context_tokens, req.prefill_left = context0 + n, left0 - n  # after `step`
        while req.prefill_left > n and ends[-1] <= self.stretch_limit_s:
            blocks = self._blocks_for(req, n)
            need = blocks - b.cached * pool.unit_blocks - b.plain
            if need > 0 and not pool.can_allocate(need):
                break  # the step-by-step compose preempts: it runs there
            # `_compose` at this step's start, as it goes for this one chunk
            self.now_s = link.now_s = pool.sync_until_s = now = ends[-1]
            if need > 0:
                pool.allocate(need)
            self._account(req, n, blocks)
            # no request resumes in a stretch: only the stores its blocks wait for stall it
            end = now + costs.prefill_step_s(n, req.context_tokens, decode_context,
                                             pool.sync_until_s - now)
            self._prev_step_s = end - now
            ends.append(end)
            req.context_tokens += n
            req.prefill_left -= n
        self.now_s, req.context_tokens, req.prefill_left = now0, context0, left0
        if len(ends) == 1:
            return step
        return self._start_stretch(step, ends)

    def _unit(self, req: SimRequest) -> int:
        """Tokens per cache unit: the trace page when it is a whole number of blocks (the
        trace names content per page, so hits are the same), else one block."""
        if not self.U:
            page, B = req.page_tokens, self.B
            self.U = page if page > B and page % B == 0 else B
            self.pool.set_unit(self.U // B)
        elif req.page_tokens != self.U and self.U != self.B:
            self.U = self.B  # mixed page sizes: per block from now on is not possible
            raise SimError(f"vllm_blocks: requests with {req.page_tokens}- and "
                           f"{self.U}-token pages in one run")
        return self.U

    def _blocks_total(self, req: SimRequest) -> int:
        tokens = req.input_tokens + req.output_tokens + self.costs.request_state_tokens
        return -(-tokens // self.B)

    def _blocks_for(self, req: SimRequest, n: int) -> int:
        """Blocks the request's table holds once `n` more tokens are scheduled (plus its
        output's blocks when `n` ends the prefill)."""
        tokens = req.context_tokens + n
        if n == req.prefill_left:
            tokens += req.output_tokens + self.costs.request_state_tokens
        return -(-tokens // self.B)

    def _grow(self, req: SimRequest, n: int) -> bool:
        """Allocate the blocks for `n` more tokens of a running request, preempting the
        newest running requests while the pool is short. False: `req` preempted itself."""
        self._preempted_now = False
        b: BlockTable = req.blocks
        pool = self.pool
        blocks = self._blocks_for(req, n)
        need = blocks - b.cached * pool.unit_blocks - b.plain
        if need > 0:
            while not pool.can_allocate(need):
                victim = next(reversed(self.running))
                self._preempt(victim)
                self._preempted_now = True
                if victim is req:
                    return False
            pool.allocate(need)
        self._account(req, n, blocks)
        return True

    def _account(self, req: SimRequest, n: int, blocks: int) -> None:
        """The table holds `blocks` blocks once the next `n` tokens are scheduled: those
        that complete prompt units are cached, the rest stay plain."""
        b: BlockTable = req.blocks
        done = (req.context_tokens + n) // self.U
        if done > b.full:
            done = b.full
        if done > b.cached:
            b.tail = self.pool.cache(b.tail, b.chain, b.cached, done)
            b.cached = done
        # the table holds the blocks for the tokens so far; what is not in cached units
        # is plain (a unit's blocks that only part-filled it stay plain until it fills)
        b.plain = blocks - b.cached * self.pool.unit_blocks

    def _prompt_blocks(self, req: SimRequest) -> int:
        """Blocks of the request's whole prompt (and outputs to recompute after preemption):
        what vLLM's full-sequence admission check asks for."""
        return -(-(req.input_tokens + req.blocks.extra) // self.B)

    def _reserved_blocks(self) -> int:
        """Blocks the prefilling and loading requests still need to finish their prefill: an
        asynchronous load may not take them (vLLM 0.26 core/sched/scheduler.py,
        _inflight_prefill_reserved_blocks). vLLM reserves the blocks of the tokens so far
        (its outputs take a block per decode step later, a running request preempting
        itself when short); here the last chunk takes the output's blocks too, so the
        reservation counts them: else two loads can hold the pool between them with nothing
        running to free it (issue 26's deadlock)."""
        k = self.pool.unit_blocks
        return sum(max(0, self._blocks_for(r, r.prefill_left) - r.blocks.cached * k
                       - r.blocks.plain)
                   for group in (self.prefilling, self.loading) for r in group)

    def _schedule_waiting(self, req: SimRequest, budget: int) -> tuple[int, int] | None:
        """First chunk of a waiting request: (tokens, host tokens loaded) or None. Tokens 0:
        it went to load its host hit first (`loading`)."""
        pool, costs = self.pool, self.costs
        b: BlockTable | None = req.blocks
        if b is None:
            b = req.blocks = self._chains.table(req, self._unit(req))
        U, k = self.U, pool.unit_blocks
        prompt = req.input_tokens + b.extra
        limit = (prompt - 1) // U
        if limit > b.full:
            limit = b.full
        if b.retry_at == pool.changes:  # refused before, and the pool is as it left it
            dev, host, queued, run = b.retry
        else:
            dev, host, run = pool.lookup(b.chain, limit)
            queued = pool.free_units(run, dev)
        hit = dev + host
        req.context_tokens = hit * U
        n = req.prefill_left = prompt - hit * U
        if n > budget:
            n = budget
        asynchronous = host > 0 and costs.load_ready_steps >= 0
        # the loaded blocks only, beside what the prefilling requests still need; or the
        # first chunk's blocks
        blocks = self._blocks_for(req, n)
        need = (hit - dev) * k if asynchronous else blocks - dev * k
        room = need + (self._reserved_blocks() if asynchronous else 0)
        # free blocks once the hit is taken out of the free queue (what `touch` would leave)
        free = pool.num_free - queued * k
        if room > free or (costs.admit_full_prompt and self._prompt_blocks(req) - dev * k > free):
            if b.retry_at != pool.changes:  # (else this requeue was the pool's last change)
                run = pool.requeue(run, dev)  # as a touch and its undo would
                b.retry_at, b.retry = pool.changes, (dev, host, queued, run)
            return None
        b.tail = pool.touch(run, dev)
        pool.allocate(need)
        b.cached = dev
        if host:
            b.tail = pool.cache(b.tail, b.chain, dev, hit)
            pool.load(host)
            b.cached = hit
        if not b.scheduled:
            b.scheduled = True
            req.admit_s = self.now_s
            req.device_hit_tokens, req.host_hit_tokens = dev * U, host * U
        self.num_running += 1
        if asynchronous:
            b.plain = 0
            b.ready_s = self.now_s + self.link.load_s(host * U)
            b.starts_after_ready = 0
            self.loading.append(req)
            return 0, host * U
        self._account(req, n, blocks)
        self.prefilling.append(req)
        self.running[req] = None
        return n, host * U

    def _resume(self, req: SimRequest, budget: int) -> int | None:
        """The first chunk after a request's host load: its tokens, or None when the blocks
        for it (or, with `admit_full_prompt`, for its whole prompt) are not free."""
        b: BlockTable = req.blocks
        pool, held = self.pool, b.cached * self.pool.unit_blocks + b.plain
        n = min(req.prefill_left, budget)
        blocks = self._blocks_for(req, n)
        need = blocks - held
        if not pool.can_allocate(need) or (self.costs.admit_full_prompt and not (
                pool.can_allocate(self._prompt_blocks(req) - held))):
            return None
        if need > 0:
            pool.allocate(need)
        self._account(req, n, blocks)
        self.loading.remove(req)
        self.prefilling.append(req)
        self.running[req] = None
        return n

    def device_cached_tokens(self, req: SimRequest) -> int:
        if not req.keys:
            return 0
        b = block_chain(req, self._unit(req))
        return self.pool.match(b.chain, b.full)[0] * self.U

    def active_requests(self):
        yield from self.waiting
        yield from self.loading
        yield from self.running

    # -- preemption ------------------------------------------------------------------------
    def _preempt(self, req: SimRequest) -> None:
        b: BlockTable = req.blocks
        del self.running[req]
        self.num_running -= 1
        self.pool.preemptions += 1
        if req in self._decoders:  # decoding: remember what is left; recompute the output
            done_steps = self.decode_step - req.decode_join_step
            b.decode_left = req.decode_steps - done_steps
            b.extra = min(req.output_tokens, 1 + int(done_steps * self.costs.accept_length))
            self._leave_decode(req)
        else:
            self.prefilling.remove(req)
        self.pool.release(b.tail, b.plain)
        b.tail, b.cached, b.plain = None, 0, 0
        self.waiting.appendleft(req)

    def _preempt_loading(self, req: SimRequest) -> None:
        """A loaded request that cannot go on frees its blocks and waits at the head."""
        b: BlockTable = req.blocks
        self.loading.remove(req)
        self.num_running -= 1
        self.pool.preemptions += 1
        self.pool.release(b.tail, b.plain)
        b.tail, b.cached, b.plain = None, 0, 0
        self.waiting.appendleft(req)

    def _leave_decode(self, req: SimRequest) -> None:
        del self._decoders[req]
        self.decode_batch -= 1
        self._decode_base -= req.context_tokens - self.costs.accept_length * (
            req.decode_join_step)
        req.finish_seq = -1  # its heap entry is stale

    # -- applying a step -------------------------------------------------------------------
    def _prefill_done(self, req: SimRequest, now: float) -> None:
        b: BlockTable = req.blocks
        if b.decode_left < 0:
            super()._prefill_done(req, now)
            return
        # a preempted decoder recomputed prompt + output so far: it goes on decoding
        left, b.decode_left, b.extra = b.decode_left, -1, 0
        if left <= 0:
            self._finish(req, now)
        else:
            self._join_decode(req, left)

    def _finish(self, req: SimRequest, now: float) -> None:
        self.running.pop(req, None)
        super()._finish(req, now)

    def _release(self, req: SimRequest) -> None:
        b: BlockTable = req.blocks
        self.pool.release(b.tail, b.plain)
        b.tail, b.cached, b.plain = None, 0, 0


def vllm_pool(device_tokens: float, host_tokens: int, block_tokens: int,
              lazy_offload_budget_tokens: int | None = None) -> BlockPool:
    """A block pool for tier sizes in tokens (whole blocks). `lazy_offload_budget_tokens`:
    lazy offload with a step's token budget of that size, whose blocks it keeps stored ahead
    of eviction twice over (vllm 0.26 simple_kv_offload/manager.py
    _estimate_lazy_target_blocks, WATERMARK_RATIO 1.0)."""
    pool = BlockPool(int(device_tokens // block_tokens), block_tokens,
                     int(host_tokens // block_tokens))
    if lazy_offload_budget_tokens is not None:
        pool.lazy_target_blocks = pool.lazy_target = 2 * -(
            -lazy_offload_budget_tokens // block_tokens)
    return pool

