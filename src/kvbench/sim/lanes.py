"""Closed-loop session lanes in virtual time, by the same workload bounds as `kvbench replay`
(`kvbench.workload.bounds`): the same sessions per lane, the same turns, caps, warm-up and
stop rules, so a simulation and a replay of one command line are of the same requests.

A lane submits its next turn when the previous one finishes (plus the capped think time);
whether it is sent at all, and whether it is warm-up, is decided when it arrives (in arrival
order, as the replay decides at send time): a send at or past the deadline, or past the
request cap, stops every lane. Requests still running `grace_s` after the deadline are
cancelled (not in the summary), as the replay cancels them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.errors import SimError
from kvbench.sim.engine import Engine
from kvbench.sim.request import SimRequest
from kvbench.workload.blocks import common_prefix, namespaced
from kvbench.workload.bounds import SessionPool, WorkloadBounds, pass_key, pass_namespace
from kvbench.workload.session import Session

# Page keys are (namespace index, hash id) packed into one int: hash ids of one namespace
# stay below this, so keys of different namespaces never collide.
_KEY_SPAN = 1 << 64
# A refused request (400) answers after an HTTP round trip, not at the instant it was sent:
# a floor of the order of a loopback request to the server, so that a lane whose every
# request is refused still advances in virtual time (with zero think time it would
# otherwise refuse, recycle and resend forever at one instant: issue 26's property test).
REFUSAL_ROUND_TRIP_S = 1e-3


@dataclass(slots=True)
class _Lane:
    index: int
    session: Session | None = None
    key: str = ""
    ns_base: int = 0
    start: int = 0
    turn: int = 0  # next turn index to consider
    sent_one: bool = False  # a turn of this session was sent (the next one waits think time)
    # the page keys last sent per agent of this session pass (None: the main agent) and the
    # ids they came from: the next turn of an agent continues its previous prompt, so its
    # keys are mostly a copy of those (AgentX prompts are 1.5K-16K pages)
    sent_keys: dict = field(default_factory=dict)


class LaneDriver:
    """Feeds an `Engine` closed-loop by `bounds`; `done` receives finished requests."""

    def __init__(self, sessions: list[Session], bounds: WorkloadBounds,
                 make_engine: Callable[..., Engine], done: list[SimRequest]) -> None:
        if bounds.concurrency < 1:
            raise SimError(f"concurrency must be >= 1, got {bounds.concurrency}")
        if not sessions:
            raise SimError("no sessions to simulate")
        self.bounds = bounds
        self.pool = SessionPool.for_bounds(sessions, bounds)
        self.done = done
        self.namespaces: dict[str, int] = {}
        self.sent = self.profiled_sent = 0
        self.stopping = False
        self.rid = 0
        self._lanes: list[_Lane] = []
        self.engine = make_engine(on_finish=self._on_finish, on_arrival=self._on_arrival)

    def run(self) -> Engine:
        self._lanes = [_Lane(i) for i in range(self.bounds.concurrency)]
        for lane in self._lanes:
            if not self._next_session(lane):
                break
            self._submit_next(lane, 0.0)
        d = self.bounds.duration_s
        self.engine.run_until(math.inf if d is None else d + self.bounds.grace_s)
        return self.engine

    # -- lanes -----------------------------------------------------------------------------
    def _next_session(self, lane: _Lane) -> bool:
        got = None if self.stopping else self.pool.take(lane.index)
        if got is None:
            lane.session = None
            return False
        session, pass_no, start = got
        ns = pass_namespace(session, pass_no)
        idx = self.namespaces.setdefault(ns, len(self.namespaces))
        lane.session, lane.key, lane.ns_base = session, pass_key(session, pass_no), idx * _KEY_SPAN
        lane.start, lane.turn, lane.sent_one = start, 0, False
        lane.sent_keys = {}
        return True

    @staticmethod
    def _keys(lane: _Lane, turn, n: int) -> list:
        """The turn's first `n` page keys in the lane's namespace."""
        ids = turn.hash_ids
        prev = lane.sent_keys.get(turn.agent)
        if prev is None:
            keys = namespaced(ids, lane.ns_base, n)
        else:
            prev_ids, prev_n, prev_keys = prev
            m = min(common_prefix(prev_ids, ids), prev_n, n)
            keys = prev_keys[:m]
            keys += namespaced(ids, lane.ns_base, n, m)
        lane.sent_keys[turn.agent] = (ids, n, keys)
        return keys

    def _submit_next(self, lane: _Lane, now_s: float) -> None:
        """Submit the lane's next sendable turn (taking new sessions as needed)."""
        bounds = self.bounds
        # a whole pass over the pool without a sendable turn (every prompt over
        # max_input_tokens): none will ever be sent, the lane ends instead of recycling forever
        tries = len(self.pool.sessions) + 1
        while lane.session is not None:
            turns = lane.session.turns
            while lane.turn < len(turns):
                k = lane.turn
                lane.turn += 1
                turn = bounds.shaped(turns[k])
                if turn is None:
                    continue
                warm_turn = k < lane.start
                at_s = now_s
                if lane.sent_one and not warm_turn:
                    at_s += bounds.think_s(turn)
                lane.sent_one = True
                page = turn.block_tokens
                keys = self._keys(lane, turn, -(-turn.input_tokens // page))
                req = SimRequest(rid=self.rid, arrival_s=at_s, input_tokens=turn.input_tokens,
                                 output_tokens=bounds.max_tokens(turn), keys=keys,
                                 page_tokens=page, session=lane.index)
                req.meta = {"session_id": lane.key, "turn": k, "lane": lane.index,
                            "warm_turn": warm_turn}
                self.rid += 1
                self.engine.submit(req, at_s)
                return
            tries -= 1
            if not tries or not self._next_session(lane):
                lane.session = None
                return

    def _on_arrival(self, req: SimRequest) -> bool:
        """The replay's send-time decision: False drops the request and stops the run."""
        bounds, meta = self.bounds, req.meta
        d = bounds.duration_s
        if self.stopping or (d is not None and req.arrival_s >= d):
            self.stopping = True
            return False
        warmup = bounds.is_warmup(meta["warm_turn"], self.sent)
        if not warmup and bounds.request_cap_reached(self.profiled_sent):
            self.stopping = True
            return False
        meta["is_warmup"] = warmup
        self.sent += 1
        if not warmup:
            self.profiled_sent += 1
        return True

    def _on_finish(self, req: SimRequest) -> None:
        self.done.append(req)
        if not self.stopping:
            now = self.engine.now_s + (REFUSAL_ROUND_TRIP_S if req.error is not None else 0.0)
            self._submit_next(self._lanes[req.session], now)
