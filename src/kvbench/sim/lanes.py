"""Closed-loop session lanes in virtual time, by the same workload bounds as `kvbench replay`
(`kvbench.workload.bounds`) and the same session trees (`kvbench.workload.tree`): the same
sessions per lane, subagents alongside their parent, the same caps, warm-up and stop rules,
so a simulation and a replay of one command line are of the same requests.

A tree's stream submits its next turn when the previous one finishes plus its think time;
whether it is sent at all, and whether it is warm-up, is decided when it arrives (in arrival
order, as the replay decides at send time): a send at or past the deadline, or past the
request cap, stops every lane. With `start="sampled"` or `warmup_per_lane` the warm-up of
replay/warmup.py runs first, in virtual time: each lane's first tree placed at t*, its t*
requests (one output token, spread on t*), then `warmup_per_lane` one-token requests per lane
with no idle delay, then the profiling phase for `duration_s` from its own start, each stream
resuming at its recorded offset. Requests still running `grace_s` after the deadline are
cancelled (not in the summary), as the replay cancels them. The idle caps of the replay
(replay/idle.py) apply in the profiling phase: when none of a tree's requests is in flight
(sent and not finished) its requests still on their way, and the due times its `TreeRun`
keeps (a blocked root, held turns), move earlier so the next leaves within
`tree_idle_cap_s`; when nothing is in flight anywhere, every lane's the same by
`system_idle_cap_s`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.errors import SimError
from kvbench.sim.engine import Engine
from kvbench.sim.request import SimRequest
from kvbench.workload.blocks import common_prefix, namespaced
from kvbench.workload.bounds import SessionPool, WorkloadBounds, pass_key, pass_namespace
from kvbench.workload.prompt import Vocabulary, tree_marker
from kvbench.workload.session import Session
from kvbench.workload.tree import ROOT, Ready, Resume, TreeRun, phase_start, place_first

# Page keys are (namespace index, hash id) packed into one int: hash ids of one namespace
# stay below this, so keys of different namespaces never collide.
_KEY_SPAN = 1 << 64
# A refused request (400) answers after an HTTP round trip, not at the instant it was sent:
# a floor of the order of a loopback request to the server, so that a lane whose every
# request is refused still advances in virtual time (with zero think time it would
# otherwise refuse, recycle and resend forever at one instant: issue 26's property test).
REFUSAL_ROUND_TRIP_S = 1e-3
WARMUP_MAX_TOKENS = 1  # agentic_replay.py `_WARMUP_MAX_TOKENS`
# the run's part of each tree's cache-bust marker (`tree_marker`): any one value, since trees
# are told apart within a run
RUN_MARKER = "sim"
# a marker's tokens, counted as the replay counts them without a tokenizer (and as serve-sim
# counts words): the marker is one word
_WORDS = Vocabulary()


@dataclass(slots=True)
class _Lane:
    index: int
    session: Session | None = None
    run: TreeRun | None = None
    key: str = ""
    ns_base: int = 0
    # with tree markers (module docstring): the page keys of the blocks from the marker on,
    # the tree's own, and the marker's tokens (added to each prompt that carries it)
    tree_base: int = 0
    marker_tokens: int = 0
    chats: dict = field(default_factory=dict)  # stream -> its turn places and marker blocks
    pass_no: int = 0
    origin_s: float = 0.0  # the recorded instant its handoff offsets count from
    resume: Resume | None = None  # where its tree picks up in the profiling phase
    warm: list = field(default_factory=list)  # its t* requests
    # the page keys last sent per stream of this session pass (None: the root agent) and the
    # ids they came from: a stream's next turn continues its previous prompt, so its keys are
    # mostly a copy of those (AgentX prompts are 1.5K-16K pages)
    sent_keys: dict = field(default_factory=dict)
    waiting: dict = field(default_factory=dict)  # rid -> its requests not arrived yet
    inflight: int = 0  # its requests arrived and not finished


class LaneDriver:
    """Feeds an `Engine` closed-loop by `bounds`; `done` receives finished requests."""

    def __init__(self, sessions: list[Session], bounds: WorkloadBounds,
                 make_engine: Callable[..., Engine], done: list[SimRequest],
                 lead_cap_s: float | None = 10.0) -> None:
        if bounds.concurrency < 1:
            raise SimError(f"concurrency must be >= 1, got {bounds.concurrency}")
        if not sessions:
            raise SimError("no sessions to simulate")
        self.bounds = bounds
        self.pool = SessionPool.for_bounds(sessions, bounds)
        self.done = done
        self.lead_cap_s = lead_cap_s
        self.namespaces: dict[str, int] = {}
        self.sent = self.profiled_sent = 0
        self.stopping = False
        self.rid = 0
        self.phase = "profiling"
        self.deadline_s: float | None = None
        self.profiling_start_s = 0.0
        self.quota: dict[int, int] = {}
        self.failed_warmup: list[str] = []
        self.warmup_error: str | None = None  # the first failed warm-up request's error
        self.inflight = 0
        self.idle_shifts = 0
        self._lanes: list[_Lane] = []
        self.engine = make_engine(on_finish=self._on_finish, on_arrival=self._on_arrival)

    def run(self) -> Engine:
        b = self.bounds
        self._lanes = [_Lane(i) for i in range(b.concurrency)]
        if b.start == "sampled" or b.warmup_per_lane:
            self._warm_up()
        if not self.stopping:
            self._profile()
        return self.engine

    # -- phases ----------------------------------------------------------------------------
    def _warm_up(self) -> None:
        b, engine = self.bounds, self.engine
        for lane in self._lanes:
            self._place(lane)
        self.phase = "primers"
        leads = [w.lead_s for lane in self._lanes for w in lane.warm if w.lead_s is not None]
        max_lead = max(leads, default=0.0)
        for lane in self._lanes:
            for w in lane.warm:
                at = engine.now_s + ((max_lead - w.lead_s) if w.lead_s is not None else 0.0)
                self._submit(lane, Ready(w.stream, w.k, at), warm=True, primer=True)
        engine.run_until()
        if self.failed_warmup:
            self.stopping = True
            return
        if b.warmup_per_lane:
            self.phase = "pressure"
            for lane in self._lanes:
                if lane.session is None:
                    continue
                self.quota[lane.index] = b.warmup_per_lane
                lane.run = self._tree(lane.session, zero_delay=True)
                for r in lane.run.resume(lane.resume, engine.now_s):
                    self._submit(lane, r, warm=True)
            engine.run_until()
            for lane in self._lanes:
                # a lane the pool ran out for has nothing to resume (the replay's lane ends)
                lane.resume = None if lane.run is None else lane.run.handoff(lane.origin_s)
        if self.failed_warmup:
            self.stopping = True

    def _profile(self) -> None:
        b, engine = self.bounds, self.engine
        self.phase = "profiling"
        self.profiling_start_s = engine.now_s
        if b.duration_s is not None:
            self.deadline_s = self.profiling_start_s + b.duration_s
        placed = [lane for lane in self._lanes if lane.resume is not None]
        for lane, resume in zip(placed, phase_start([(x.run, x.resume) for x in placed]),
                                strict=True):
            lane.run = self._tree(lane.session)
            for r in lane.run.resume(resume, engine.now_s):
                self._submit(lane, r)
            if lane.run.done:
                # its tree ended in the warm-up: the replay drives it, sends nothing, and the
                # lane takes the pool's next session at once (replay/lanes.py run_lane)
                lane.resume = None
        for lane in self._lanes:
            if lane.resume is None and not self._start_next(lane, engine.now_s, False):
                break
        for lane in self._lanes:  # a tree idle from the start (`observe_idle_root`)
            self._cap_idle(lane, engine.now_s)
        d = self.deadline_s
        engine.run_until(math.inf if d is None else d + b.grace_s)

    # -- lanes -----------------------------------------------------------------------------
    def _tree(self, session: Session, zero_delay: bool = False) -> TreeRun:
        b = self.bounds
        return TreeRun(session, b.shaped, b.think_s, zero_delay=zero_delay,
                       delay_scale=b.think_time_scale)

    def _bind(self, lane: _Lane, session: Session, pass_no: int) -> None:
        busted = self.bounds.tree_markers
        ns = pass_namespace(session, pass_no, busted)
        lane.session, lane.pass_no = session, pass_no
        lane.key, lane.ns_base = pass_key(session, pass_no), self._namespace(ns)
        lane.sent_keys, lane.chats = {}, {}
        if busted:
            # the replay's marker of this tree (replay/lanes.py `new_tree`): its identity
            marker = tree_marker(RUN_MARKER, pass_no, lane.index, session.session_id)
            lane.tree_base = self._namespace(f"{ns}\x1f{marker}")
            lane.marker_tokens = _WORDS.count(marker)

    def _namespace(self, name: str) -> int:
        """The page keys' offset of namespace `name`."""
        return self.namespaces.setdefault(name, len(self.namespaces)) * _KEY_SPAN

    def _place(self, lane: _Lane) -> None:
        """The lane's first tree at t* (replay/warmup.py, workload/tree.py `place_first`)."""
        p = place_first(self.pool, self.bounds, lane.index, self.lead_cap_s, self._tree)
        if p is None:
            return
        self._bind(lane, p.session, p.pass_no)
        lane.run, lane.resume, lane.warm, lane.origin_s = p.run, p.resume, p.warm, p.origin_s

    def _next_session(self, lane: _Lane, zero_delay: bool = False) -> bool:
        got = None if self.stopping else self.pool.take()
        if got is None:
            lane.session = lane.run = None
            return False
        self._bind(lane, *got)
        lane.run = self._tree(lane.session, zero_delay)
        lane.origin_s = lane.run.origin_s()
        return True

    def _submit(self, lane: _Lane, r: Ready, warm: bool = False, primer: bool = False) -> None:
        """Submit one ready turn (a quota-spent lane's warm-up turn waits for the handoff)."""
        if self.phase == "pressure":
            left = self.quota.get(lane.index, 0)
            if left <= 0:
                return
            self.quota[lane.index] = left - 1
        turn = lane.run.turns[r.k]
        page = turn.block_tokens
        at = self._marker_at(lane, r) if self.bounds.tree_markers else None
        keys = self._keys(lane, turn, -(-turn.input_tokens // page), at)
        out = WARMUP_MAX_TOKENS if warm else self.bounds.max_tokens(turn)
        marker = 0 if at is None else lane.marker_tokens  # unpaged: never a hit
        req = SimRequest(rid=self.rid, arrival_s=r.at_s,
                         input_tokens=turn.input_tokens + marker, output_tokens=out,
                         keys=keys, page_tokens=page, session=lane.index)
        req.meta = {"session_id": lane.key, "turn": r.k, "lane": lane.index,
                    "warm_turn": warm, "stream": r.stream, "primer": primer,
                    "agent": turn.agent}
        self.rid += 1
        if not primer:
            lane.run.sent(r.k)
        lane.waiting[req.rid] = req
        self.engine.submit(req, r.at_s)

    @staticmethod
    def _marker_at(lane: _Lane, r: Ready) -> int | None:
        """The block the tree's marker precedes in this turn's messages, as the replay
        places it (workload/tree.py `marker_places`); None: the turn carries no marker."""
        got = lane.chats.get(r.stream)
        if got is None:
            got = lane.chats[r.stream] = lane.run.marker_places(r.stream)
        places, blocks = got
        return blocks[places[r.k]]

    @staticmethod
    def _keys(lane: _Lane, turn, n: int, at: int | None = None) -> list:
        """The turn's first `n` page keys: in the lane's namespace, or with a tree marker
        before block `at`, those from it on in the tree's own."""
        ids = turn.hash_ids
        prev = lane.sent_keys.get(turn.agent)
        m = 0
        if prev is not None and prev[3] == at:
            prev_ids, prev_n, prev_keys, _ = prev
            m = min(common_prefix(prev_ids, ids), prev_n, n)
            keys = prev_keys[:m]
        else:
            keys = []
        if at is None:
            keys += namespaced(ids, lane.ns_base, n, m)
        else:
            cut = min(max(at, m), n)
            if m < cut:
                keys += namespaced(ids, lane.ns_base, cut, m)
            keys += namespaced(ids, lane.tree_base, n, cut)
        lane.sent_keys[turn.agent] = (ids, n, keys, at)
        return keys

    def _on_arrival(self, req: SimRequest) -> bool:
        """The replay's send-time decision: False drops the request and stops the run."""
        bounds, meta = self.bounds, req.meta
        lane = self._lanes[req.session]
        lane.waiting.pop(req.rid, None)
        d = self.deadline_s
        if self.stopping or (d is not None and req.arrival_s >= d):
            self.stopping = True
            return False
        warmup = bounds.is_warmup(meta["warm_turn"], self.sent)
        if not warmup and bounds.request_cap_reached(self.profiled_sent):
            self.stopping = True
            return False
        meta["is_warmup"] = warmup
        lane.inflight += 1
        self.inflight += 1
        self.sent += 1
        if not warmup:
            self.profiled_sent += 1
        return True

    def _on_finish(self, req: SimRequest) -> None:
        self.done.append(req)
        # a finished request is only counted from here on: its page keys and block table
        # (the lane and the pool keep what they still need) would hold a run's every
        # prompt in memory to its end
        req.keys, req.blocks = [], None
        meta = req.meta
        lane = self._lanes[req.session]
        lane.inflight -= 1
        self.inflight -= 1
        if meta.get("warm_turn") and req.error is not None and meta["stream"] == ROOT:
            self.failed_warmup.append(meta["session_id"])  # the harness aborts the run
            self.warmup_error = self.warmup_error or req.error
        if meta.get("primer") or self.stopping or lane.run is None:
            return
        now = self.engine.now_s + (REFUSAL_ROUND_TRIP_S if req.error is not None else 0.0)
        ready = lane.run.finished(meta["turn"], now)
        warm = self.phase == "pressure"
        for r in ready:
            self._submit(lane, r, warm=warm)
        # the lane takes its next session once its whole tree is done
        if lane.run.done and not (warm and self.quota.get(lane.index, 0) <= 0):
            self._start_next(lane, now, warm)
        self._cap_idle(lane, now)

    def _cap_idle(self, lane: _Lane, now: float) -> None:
        """The replay's idle caps (module docstring), at the instant a scope falls idle."""
        b = self.bounds
        if self.phase != "profiling":
            return  # warm-up requests go back to back: no idle to cap
        if b.tree_idle_cap_s is not None and not lane.inflight:
            self._shift([lane], now, b.tree_idle_cap_s)
        if b.system_idle_cap_s is not None and not self.inflight:
            self._shift(self._lanes, now, b.system_idle_cap_s)

    def _shift(self, lanes: list[_Lane], now: float, cap_s: float) -> None:
        waiting = [r for lane in lanes for r in lane.waiting.values()]
        if not waiting:
            return
        gap = min(r.arrival_s for r in waiting) - now - cap_s
        if gap <= 0:
            return
        self.idle_shifts += 1
        self.engine.reschedule(waiting, gap)
        for lane in lanes:
            if lane.run is not None:
                lane.run.shift(gap)

    def _start_next(self, lane: _Lane, now: float, warm: bool) -> bool:
        """The lane's next session from its first turn; a whole pass over the pool without a
        sendable turn (every prompt over max_input_tokens) ends the lane."""
        for _ in range(len(self.pool.sessions) + 1):
            if not self._next_session(lane, zero_delay=warm):
                return False
            ready = lane.run.start(now)
            for r in ready:
                self._submit(lane, r, warm=warm)
            if ready:
                return True
        return False

