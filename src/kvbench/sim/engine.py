"""The continuous-batching engine in virtual time: FCFS admission, chunked prefill, a running
request cap and a token budget per step, over the tiered cache and the cost model.

Time only moves in steps. A step is composed when it starts (admissions happen then) and its
effects (first tokens, decode progress, completions) land when it ends. Decode-only stretches
advance in one jump to the next event (an arrival, a completion, the caller's horizon) using
the closed-form sum of step times, so the cost per request is O(pages + log n), not O(steps).
Decode progress is kept as one global step counter: a request that joined decode at step j
has emitted floor((s - j) * accept_length) tokens after step s."""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvbench.errors import SimError
from kvbench.sim.arrivals import Arrivals
from kvbench.sim.cache import TieredCache
from kvbench.sim.checkpoints import StateCheckpoints
from kvbench.sim.context import context_error, over_context
from kvbench.sim.costs import CostModel
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.gaps import GapLog
from kvbench.sim.link import HostLink
from kvbench.sim.request import SimRequest


@dataclass(slots=True)
class _Step:
    start_s: float
    end_s: float
    chunks: list[tuple[SimRequest, int]]
    decode_steps: int


CANCELLED = "cancelled: the client went away"


def _first_reaching(steps_s: Callable[[int], float], gap_s: float, k_max: int,
                    k_max_s: float) -> tuple[int, float]:
    """The fewest decode steps k in [1, k_max] whose time steps_s(k) is >= gap_s, and that
    time, given steps_s(k_max) = k_max_s >= gap_s; steps_s grows with k. The answer a
    bisection gives, in about three calls instead of log2(k_max): steps_s is a sum of step
    times linear in the step (a quadratic in k, piecewise where the roofline's arms cross),
    so the quadratic through k = 0, 1 and k_max lands on or next to it; a bisection of what
    is left makes sure."""
    s1 = steps_s(1)
    if s1 >= gap_s:
        return 1, s1
    lo, hi, hi_s = 1, k_max, k_max_s  # steps_s(lo) < gap_s <= steps_s(hi)
    b = (k_max_s / k_max - s1) / (k_max - 1)  # steps_s(k) ~ a k + b k^2
    a = s1 - b
    if b > 0:
        root = (math.sqrt(a * a + 4 * b * gap_s) - a) / (2 * b)
    else:
        root = gap_s / a if a > 0 else math.nan
    probes = []
    if math.isfinite(root):
        guess = math.ceil(root)
        probes = [guess, guess - 1, guess + 1]
    while hi - lo > 1:
        k = probes.pop(0) if probes else (lo + hi) // 2
        if not lo < k < hi:
            continue
        k_s = steps_s(k)
        if k_s >= gap_s:
            hi, hi_s = k, k_s
        else:
            lo = k
    return hi, hi_s


class Engine:
    def __init__(self, cache: TieredCache, costs: CostModel,
                 config: EngineConfig | None = None,
                 on_finish: Callable[[SimRequest], None] | None = None,
                 on_arrival: Callable[[SimRequest], bool] | None = None) -> None:
        self.cache = cache
        self.costs = costs
        self.config = config or EngineConfig()
        if self.config.max_running_requests < 1 or self.config.chunked_prefill_tokens < 1:
            raise SimError("max_running_requests and chunked_prefill_tokens must be >= 1")
        self.on_finish = on_finish
        # Called as each request arrives, in arrival order; False drops it (the closed-loop
        # driver decides there whether a send happens, as the replay does at send time).
        self.on_arrival = on_arrival
        self.now_s = 0.0
        self.gaps = GapLog()  # inter-token gaps as the replay measures them (sim/gaps.py)
        self.arrivals = Arrivals()
        # the receive counter of `recv_interval_steps` (`_count_receive`) and whether the
        # scheduler takes in new requests at the current step boundary
        self._recv_count = 0
        self._recv_due = True
        self._seq = 0
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: deque[SimRequest] = deque()
        self.num_running = 0
        self._step: _Step | None = None
        # decode state: global step counter, batch size, context = base + growth * step
        self.decode_step = 0
        self.decode_batch = 0
        self._decode_base = 0.0
        self._decoders: dict[SimRequest, None] = {}
        self._finishing: list[tuple[int, int, SimRequest]] = []
        self.completed = 0
        self.rejected = 0
        # Decode stretches end at the caller's horizon (it comes back then). Engines run side
        # by side (ranks.py) plan to their own next event instead: a request that another
        # rank sends them mid-stretch cuts the stretch short (`submit`).
        self.plan_to_horizon = True
        # serve-sim's virtual clock (sim/lockstep.py): after a step, stop before composing the
        # next while this says a client owes a request, so one sent at that instant joins the
        # next step (as the simulator's lanes submit theirs from the finish callback)
        self.hold: Callable[[], bool] | None = None
        self.cut_s = math.inf  # `cut_at`
        # A prefill stretch (`_plan_stretch`): the end times of the steps planned ahead for
        # `_stretch_req`, `_stretch_tokens` each, run in pieces that end where an arrival is
        # seen; steps [_piece_first, _piece_last] are in flight. Engines side by side only
        # (`stretches`), to the horizon of the ranks' run (`stretch_limit_s`).
        self.stretches = False
        self.stretch_limit_s = math.inf
        self._ends: list[float] | None = None
        self._stretch_req: SimRequest | None = None
        self._stretch_tokens = 0
        self._piece_first = self._piece_last = 0
        # one queue per direction of the host link, shared by every transfer (link.py)
        self.link = HostLink.for_costs(costs)
        cache.link = self.link
        if isinstance(cache, TieredCache):
            cache.load_back_min_tokens = costs.load_back_min_tokens
        # a hybrid model's prefix hits end at saved states (SGLang's mamba radix cache)
        self.checkpoints = (StateCheckpoints(costs.state_checkpoint_tokens)
                            if costs.state_checkpoint_tokens and self.config.kv_manager == "radix"
                            else None)

    # -- input -----------------------------------------------------------------------------
    def close(self) -> None:
        """Once the run is over: drop the hooks (the caller's methods, which hold the caller
        and with it this engine) and the cache's parent links, so that what the run built
        holds no reference cycle and is freed as soon as it is dropped."""
        self.on_finish = self.on_arrival = None
        self.cache.close()

    def submit(self, req: SimRequest, at_s: float | None = None) -> None:
        """Queue a request arriving at `at_s` (default now; never earlier than now). The
        scheduler sees it once the host's one tokenizer thread has tokenized its prompt
        (`prompt_token_overhead_s` per prompt token, sim/tokenizer.py); its TTFT still counts
        from its arrival."""
        req.arrival_s = max(self.now_s, req.arrival_s if at_s is None else at_s)
        seen_s = self.arrivals.push(
            req, self.costs.prompt_token_overhead_s * req.input_tokens, self.now_s)
        step = self._step
        if step is None or step.end_s <= seen_s:
            return
        if step.decode_steps > 1 and not step.chunks:
            # A decode stretch in flight was planned to the next arrival known then: end it
            # at the first step boundary after this one (arrivals from another rank).
            self._step = self._decode_stretch(self._decode_context(), math.inf)
        elif self._ends is not None and step.chunks:  # a prefill stretch's piece, likewise
            self._step = self._piece(self._piece_first, seen_s)

    def reschedule(self, reqs: list[SimRequest], by_s: float) -> None:
        """Move requests still on their way `by_s` earlier (never before now): a client's
        idle cap (sim/lanes.py). One the tokenizer thread took already keeps its time there."""
        for req in self.arrivals.take({id(r) for r in reqs}):
            req.arrival_s = max(self.now_s, req.arrival_s - by_s)
            self.submit(req, req.arrival_s)

    def cancel(self, req: SimRequest) -> None:
        """Withdraw a request whose client went away (serve-sim): from the arrivals or the
        waiting queue at once; from the running set at once when decoding (its KV is
        released), at the end of its prefill otherwise (a step in flight may hold its chunk).
        It counts as neither completed nor rejected, and its sink hears nothing more."""
        if req.finish_s >= 0 or req.error == CANCELLED:
            return
        req.error, req.sink = CANCELLED, None
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self._decoders:
            self._withdraw_decoder(req, self.now_s)
        elif not self.arrivals.remove(req):
            return  # prefilling: _apply ends it when its prefill completes
        req.finish_s = self.now_s

    def _withdraw_decoder(self, req: SimRequest, now: float) -> None:
        del self._decoders[req]
        self.decode_batch -= 1
        self._decode_base -= req.context_tokens - self.costs.accept_length * req.decode_join_step
        self._release(req)
        self.num_running -= 1
        req.finish_s = now

    def device_cached_tokens(self, req: SimRequest) -> int:
        """Prompt tokens of `req` this engine's device tier holds now (a router's view)."""
        return self.cache.match_tokens(req.keys)[0] if req.keys else 0

    def active_requests(self):
        """Requests waiting, prefilling or decoding here (not those still on their way)."""
        yield from self.waiting
        yield from self.prefilling
        yield from self._decoders

    @property
    def num_queued(self) -> int:
        return len(self.waiting) + self.arrivals.size

    def is_idle(self) -> bool:
        return self._step is None and not self.arrivals and not self.waiting and (
            self.num_running == 0
        )

    def next_event_s(self) -> float | None:
        """When something next happens without new input (a step ends or a request arrives)."""
        if self._step is not None:
            return self._step.end_s
        if self.waiting or self.num_running:
            return self.now_s
        return self.arrivals.next_s()

    # -- the loop --------------------------------------------------------------------------
    def run_until(self, horizon_s: float = math.inf, idle_to_horizon: bool = True) -> None:
        """Run every step that ends by `horizon_s`; leaves a step in flight past it. An idle
        engine's clock moves to the horizon unless `idle_to_horizon` is off (ranks.py: it
        stays at its last event, as a rank advanced event by event leaves it). `cut_at`
        during the run lowers the horizon."""
        arrivals = self.arrivals
        counting = self.config.recv_interval_steps > 1  # (`_count_receive`)
        self.cut_s = math.inf
        while True:
            step = self._step
            if step is None:
                due_s = arrivals.next_s()
                if due_s is not None and due_s <= self.now_s:
                    self._take_arrivals()
                if not self.waiting and not self.num_running:
                    next_s = arrivals.next_s()
                    if next_s is None or next_s > horizon_s or next_s > self.cut_s:
                        if horizon_s != math.inf and idle_to_horizon:
                            self.now_s = max(self.now_s, horizon_s)
                        return
                    self.now_s = next_s
                    continue
                if self._ends is not None:
                    step = self._step = self._next_piece()
                else:
                    step = self._step = self._compose(
                        horizon_s if self.plan_to_horizon else math.inf)
                if step is None:
                    if self.num_running or not self.waiting:
                        continue
                    raise SimError("internal: requests wait but nothing runs to free room")
            if step.end_s > horizon_s or step.end_s > self.cut_s:
                return
            self._step = None
            self.now_s = step.end_s
            self._apply(step)
            if counting:
                self._count_receive(step)
            if self.hold is not None and self.hold():
                return

    # -- prefill stretches -----------------------------------------------------------------
    def _start_stretch(self, step: _Step, ends: list[float]) -> _Step:
        """Run `step` (one chunk of the prefilling head, the whole budget) and the steps
        planned after it, ending at `ends`, as a stretch: its first piece."""
        req, n = step.chunks[0]
        self._ends, self._stretch_req, self._stretch_tokens = ends, req, n
        return self._piece(0, self.arrivals.next_s())

    def _piece(self, first: int, seen_s: float | None) -> _Step:
        """The stretch's steps from `first` up to the first that ends at or after `seen_s`
        (when an arrival is seen: the scheduler takes it in at that boundary, and the arrival
        hook's calls keep their order across ranks), or to its end."""
        ends = self._ends
        last = len(ends) - 1
        if seen_s is not None and seen_s < ends[last]:
            last = bisect.bisect_left(ends, seen_s, first, last)
        self._piece_first, self._piece_last = first, last
        req, n, k = self._stretch_req, self._stretch_tokens, last - first + 1
        # state checkpoints count each chunk as its own (`_apply`); else one entry for all
        chunks = [(req, n)] * k if self.checkpoints is not None else [(req, n * k)]
        return _Step(self.now_s, ends[last], chunks, 0)

    def _next_piece(self) -> _Step | None:
        """At the end of a piece, the stretch's next (None: it is done, compose anew). The
        steps it holds are those a step-by-step compose would make here: its request keeps
        the whole budget, so arrivals taken in only wait."""
        first = self._piece_last + 1
        if first == len(self._ends):
            self._ends = self._stretch_req = None
            return None
        return self._piece(first, self.arrivals.next_s())

    def cut_at(self, at_s: float) -> None:
        """End the current `run_until` at `at_s` (after the step in flight is composed): a
        callback at `at_s` may have given another engine an event before the horizon."""
        self.cut_s = at_s

    def _count_receive(self, step: _Step) -> None:
        """SGLang's receive skipper (sglang 0.5.17 managers/scheduler_components/
        recv_skipper.py `handle`; weights environ.py:403-406): before each scheduler loop
        iteration the counter grows by the last batch's weight, 1 for a decode or verify step,
        1000 for a prefill; the scheduler receives when it reaches the interval, which resets
        it. A stretch of k decode steps ends at its first step after the next arrival, so only
        its last boundary can take that arrival in: it does when the count lands on the
        interval there."""
        interval = self.config.recv_interval_steps
        if interval <= 1:
            return
        if step.chunks:
            self._recv_count, self._recv_due = 0, True
            return
        self._recv_count = (self._recv_count + step.decode_steps) % interval
        self._recv_due = self._recv_count == 0

    def _take_arrivals(self) -> None:
        next_s = self.arrivals.next_s()
        if next_s is None or next_s > self.now_s:
            return  # most steps: nothing due
        if not self._recv_due:
            if self.num_running or self.waiting:
                return  # the scheduler is not receiving at this boundary
            # idle: the scheduler loop spins without a batch, the counter reaches the
            # interval at once in engine time
            self._recv_count, self._recv_due = 0, True
        hook = self.on_arrival
        for req in self.arrivals.pop_due(self.now_s):
            if hook is None or hook(req):
                self.waiting.append(req)

    # -- composing a step ------------------------------------------------------------------
    def _compose(self, horizon_s: float) -> _Step | None:
        cfg, cache = self.config, self.cache
        link = self.link
        link.now_s = cache.sync_until_s = self.now_s
        budget = cfg.chunked_prefill_tokens
        chunks: list[tuple[SimRequest, int]] = []
        for req in self.prefilling:
            if budget <= 0:
                break
            n = min(req.prefill_left, budget)
            chunks.append((req, n))
            budget -= n
        load_tokens = sync_tokens = 0
        while self.waiting and budget > 0 and self.num_running < cfg.max_running_requests:
            req = self.waiting[0]
            if self._refused_context(req):
                continue
            if req.blocked_need and self.num_running and cache.cannot_fit(req.blocked_need):
                break  # refused before, and not enough has been released since
            # the fixed per-request state (GDN/Mamba, sliding window) is not taken from this
            # pool: SGLang keeps it in pools of its own (sglang 0.5.17 mem_cache/memory_pool.py
            # :1294-1330, HybridReqToTokenPool.alloc takes a MambaPool slot per request; the
            # SWA allocator of swa_memory_pool.py), sized apart by the planner (plan/gpu.py)
            adm = cache.admit(req.keys, req.page_tokens, req.input_tokens - req.paged_tokens
                              + req.output_tokens)
            if adm is None:
                if self.num_running == 0:  # nothing will ever free room for it
                    self.waiting.popleft()
                    self._reject(req, context_error(
                        int(cache.device_capacity), req.input_tokens, req.output_tokens,
                        " (more KV than the GPU tier holds)"))
                    continue
                req.blocked_need = cache.refused_need
                break
            self.waiting.popleft()
            self._start(req, adm)
            # what a state checkpoint cut off is computed, not loaded
            load_tokens += adm.host_hit_tokens if self.checkpoints is None else (
                req.host_hit_tokens)
            sync_tokens += adm.sync_backup_tokens
            n = min(req.prefill_left, budget)
            chunks.append((req, n))
            budget -= n
        step = self._step_for(chunks, load_tokens, sync_tokens,
                              cache.sync_until_s - self.now_s, horizon_s)
        if step is not None and self._stretchable(step):
            return self._plan_stretch(step)
        return step

    def _plan_stretch(self, step: _Step) -> _Step:
        """A prefill rank's long prompt takes the whole budget step after step, alone (no
        decode batch: a disaggregated prefill rank, or an aggregated one between decodes),
        and those steps depend on nothing that arrives meanwhile: the steps that follow
        `step` are composed here at once, each at its own start, while its chunk does not end
        the prompt and it starts by the ranks' horizon. Here a step's chunk takes nothing
        (its KV was reserved at admission): only its time. `step` itself, with none after it,
        when there are none."""
        req, n = step.chunks[0]
        now0, context0 = self.now_s, req.context_tokens
        ends, left = [step.end_s], req.prefill_left - n
        req.context_tokens = context0 + n
        costs, decode_context = self.costs, self._decode_context()
        while left > n and ends[-1] <= self.stretch_limit_s:
            # `_compose` at this step's start, as it goes for this one chunk
            self.now_s = self.link.now_s = self.cache.sync_until_s = now = ends[-1]
            ends.append(now + costs.prefill_step_s(n, req.context_tokens, decode_context, 0.0))
            req.context_tokens += n
            left -= n
        self.now_s, req.context_tokens = now0, context0
        return step if len(ends) == 1 else self._start_stretch(step, ends)

    def _stretchable(self, step: _Step) -> bool:
        """Whether a stretch can start with `step` (engines side by side only): one chunk, the
        whole budget, of the prefilling head, with no decode batch, and at least two more
        whole chunks to go."""
        if not self.stretches or len(step.chunks) != 1 or step.decode_steps:
            return False
        req, n = step.chunks[0]
        return n == self.config.chunked_prefill_tokens and req.prefill_left > 2 * n and (
            bool(self.prefilling) and self.prefilling[0] is req)

    def _step_for(self, chunks: list[tuple[SimRequest, int]], load_tokens: int,
                  sync_tokens: int, sync_time_s: float, horizon_s: float) -> _Step | None:
        """The step of these prefill chunks (with the decode batch), or a decode stretch."""
        costs = self.costs
        if not chunks and not self.decode_batch:
            return None
        context = self._decode_context()
        if chunks:
            dur = costs.step_s([(n, r.context_tokens) for r, n in chunks], self.decode_batch,
                               context, load_tokens, sync_tokens,
                               self.link.load_s(load_tokens) if load_tokens > 0 else 0.0,
                               sync_time_s)
            return _Step(self.now_s, self.now_s + dur, chunks, 1 if self.decode_batch else 0)
        return self._decode_stretch(context, horizon_s)

    def _decode_context(self) -> float:
        """The decode batch's context tokens at this step (they grow by the accepted tokens
        per sequence per step)."""
        return self._decode_base + self.decode_batch * self.costs.accept_length * self.decode_step

    def _decode_stretch(self, context: float, horizon_s: float) -> _Step:
        costs, batch = self.costs, self.decode_batch
        k_max = self._finishing[0][0] - self.decode_step
        if not self.config.fast_forward:
            k_max = 1
        growth = batch * costs.accept_length
        steps_s = costs.decode_stretch(batch, context, growth)
        # Stop at the first step that ends at or after the next arrival (it is admitted then)
        # or after the horizon (the caller comes back then).
        next_s = self.arrivals.next_s()
        interval = self.config.recv_interval_steps
        if interval > 1 and next_s is not None and next_s <= self.now_s:
            # an arrival the scheduler has not taken in: decode on to the boundary where it
            # receives (`_count_receive`), or to the next finish
            k = min(k_max, interval - self._recv_count)
            return _Step(self.now_s, self.now_s + steps_s(k), [], k)
        limit = min(math.inf if next_s is None else next_s, horizon_s)
        k, dur = k_max, -1.0  # dur: steps_s(k) once known
        if limit < math.inf and k_max > 1:
            gap = limit - self.now_s
            dur = steps_s(k_max)
            if dur > gap:
                k, dur = _first_reaching(steps_s, gap, k_max, dur)
        if dur < 0:
            dur = steps_s(k)
        return _Step(self.now_s, self.now_s + dur, [], k)

    def _start(self, req: SimRequest, adm) -> None:
        req.admission = adm
        req.admit_s = self.now_s
        hit = adm.device_hit_tokens + adm.host_hit_tokens
        if hit > req.input_tokens:  # a matched partial last page: cap at the input
            over = hit - req.input_tokens
            host_cut = min(over, adm.host_hit_tokens)
            adm_host, adm_dev = adm.host_hit_tokens - host_cut, adm.device_hit_tokens - (
                over - host_cut)
        else:
            adm_host, adm_dev = adm.host_hit_tokens, adm.device_hit_tokens
        if self.checkpoints is not None:
            resumed = self.checkpoints.resumable(req, adm_dev + adm_host)
            adm_dev, adm_host = min(adm_dev, resumed), max(0, resumed - adm_dev)
        req.device_hit_tokens, req.host_hit_tokens = adm_dev, adm_host
        cached = adm_dev + adm_host
        # At least one token is computed: the logits of the last prompt token.
        req.prefill_left = max(1, req.input_tokens - max(cached, req.prefilled_tokens))
        req.context_tokens = req.input_tokens - req.prefill_left
        self.prefilling.append(req)
        self.num_running += 1

    # -- applying a step -------------------------------------------------------------------
    def _apply(self, step: _Step) -> None:
        now = self.now_s
        if step.decode_steps:
            self.gaps.record(step.end_s - step.start_s, step.decode_steps, self.decode_batch,
                             self.costs.accept_length)
            self.decode_step += step.decode_steps
            if not self.config.fast_forward:  # streaming: tokens leave step by step
                self._emit_decoded(now)
            fin = self._finishing
            while fin and fin[0][0] <= self.decode_step:
                _, seq, req = heapq.heappop(fin)
                # else: preempted since (sim/vllm.py), or cancelled and released already
                if req.finish_seq == seq and req.error != CANCELLED:
                    self._finish(req, now)
        checkpoints = self.checkpoints
        for req, n in step.chunks:
            if checkpoints is not None:
                checkpoints.computed(req, req.context_tokens, n)
            req.prefill_left -= n
            req.context_tokens += n
            if req.prefill_left == 0:
                self.prefilling.popleft()
                if req.error == CANCELLED:  # its client left while it prefilled
                    req.finish_s = now
                    self._release(req)
                    self.num_running -= 1
                    continue
                self._prefill_done(req, now)

    def _prefill_done(self, req: SimRequest, now: float) -> None:
        req.first_s = now
        req.emitted = 1
        if req.sink:
            req.sink(req, "first", 1, now)
        steps = self.costs.decode_steps_needed(req.output_tokens)
        if steps == 0:
            self._finish(req, now)
        else:
            self._join_decode(req, steps)

    def _join_decode(self, req: SimRequest, steps: int) -> None:
        req.decode_join_step = self.decode_step
        req.decode_steps = steps
        self.decode_batch += 1
        self._decode_base += req.context_tokens - self.costs.accept_length * self.decode_step
        self._decoders[req] = None
        self._seq += 1
        req.finish_seq = self._seq
        heapq.heappush(self._finishing, (self.decode_step + steps, self._seq, req))

    def _emit_decoded(self, now: float) -> None:
        acc = self.costs.accept_length
        for req in self._decoders:
            done = min(req.output_tokens, 1 + int((self.decode_step - req.decode_join_step) * acc))
            if done > req.emitted:
                new, req.emitted = done - req.emitted, done
                if req.sink:
                    req.sink(req, "tokens", new, now)

    def _finish(self, req: SimRequest, now: float) -> None:
        if req in self._decoders:
            del self._decoders[req]
            self.decode_batch -= 1
            self._decode_base -= req.context_tokens - self.costs.accept_length * (
                req.decode_join_step)
        if req.emitted < req.output_tokens and req.sink:
            req.sink(req, "tokens", req.output_tokens - req.emitted, now)
        req.emitted = req.output_tokens
        req.finish_s = now
        self._release(req)
        self.num_running -= 1
        self.completed += 1
        if req.sink:
            req.sink(req, "finish", 0, now)
        if self.on_finish:
            self.on_finish(req)

    def _release(self, req: SimRequest) -> None:
        self.cache.release(req.admission)

    def _refused_context(self, req: SimRequest) -> bool:
        """Pop and refuse the waiting head when it is over the served context."""
        limit = self.config.context_tokens
        if not over_context(limit, req.input_tokens, req.output_tokens):
            return False
        self.waiting.popleft()
        self._reject(req, context_error(limit, req.input_tokens, req.output_tokens))
        return True

    def _reject(self, req: SimRequest, why: str) -> None:
        req.error = why
        req.keys = []  # never looked up again; a refusal storm keeps only its counts
        req.finish_s = self.now_s
        self.rejected += 1
        if req.sink:
            req.sink(req, "error", 0, self.now_s)
        if self.on_finish:
            self.on_finish(req)
