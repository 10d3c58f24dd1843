"""Workload bounds: which requests a closed-loop run sends, shared by `kvbench replay` (wall
clock, HTTP) and `kvbench simulate` (virtual time), so one command line describes a
measurement and a prediction of the same requests.

Lanes take sessions in order (lane i's first session is session i, later ones go to whichever
lane frees first); with a duration or request bound, sessions are recycled, each pass in a
fresh hash namespace (a recycled session cannot hit what its previous pass cached). With
`start="sampled"` a lane's first session starts at a random turn, the turns before it sent
back to back as warm-up (they prime the cache, as if the run had been going). Per turn: the
trace's blocks rescaled to `block_tokens`, turns above `max_input_tokens` skipped, output
capped at `max_tokens_cap`, think time scaled then capped. The first `warmup_requests`
requests sent are warm-up too; `max_requests` counts profiled requests only."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from kvbench.bounds import CONTEXT_TOKENS
from kvbench.errors import WorkloadError
from kvbench.units import MAX_SESSION_LANES
from kvbench.workload.session import Session, Turn

START_MODES = ("beginning", "sampled")


@dataclass(frozen=True, slots=True)
class WorkloadBounds:
    concurrency: int = 1
    duration_s: float | None = None
    max_requests: int | None = None
    warmup_requests: int = 0
    max_tokens_cap: int | None = None
    think_time_cap_s: float = 60.0
    think_time_scale: float = 1.0
    start: str = "beginning"
    # with start="sampled": the share of each trace the first profiled turn is drawn from
    # (AgentX: 25-75%, --trajectory-start-min/max-ratio); (0, 1) is any turn
    start_ratio: tuple[float, float] = (0.0, 1.0)
    seed: int = 0
    block_tokens: int | None = None
    max_input_tokens: int | None = None
    # in-flight requests at the deadline may finish within this; the rest are cancelled
    grace_s: float = 30.0

    def __post_init__(self) -> None:
        checks = (
            ("concurrency", self.concurrency, 1 <= self.concurrency <= MAX_SESSION_LANES,
             f"1..{MAX_SESSION_LANES}"),
            ("duration_s", self.duration_s, self.duration_s is None or self.duration_s > 0,
             "> 0"),
            ("max_requests", self.max_requests,
             self.max_requests is None or self.max_requests >= 1, ">= 1"),
            ("warmup_requests", self.warmup_requests, self.warmup_requests >= 0, ">= 0"),
            ("max_tokens_cap", self.max_tokens_cap,
             self.max_tokens_cap is None or self.max_tokens_cap >= 1, ">= 1"),
            ("think_time_cap_s", self.think_time_cap_s, self.think_time_cap_s >= 0, ">= 0"),
            ("think_time_scale", self.think_time_scale, self.think_time_scale >= 0, ">= 0"),
            ("start", self.start, self.start in START_MODES, " | ".join(START_MODES)),
            ("block_tokens", self.block_tokens,
             self.block_tokens is None or self.block_tokens >= 1, ">= 1"),
            ("max_input_tokens", self.max_input_tokens,
             self.max_input_tokens is None or self.max_input_tokens >= 1, ">= 1"),
            ("grace_s", self.grace_s, self.grace_s >= 0, ">= 0"),
            ("start_ratio", self.start_ratio,
             0 <= self.start_ratio[0] <= self.start_ratio[1] <= 1, "0 <= low <= high <= 1"),
        )
        for name, value, ok, allowed in checks:
            # `not ok` also catches NaN, which fails every comparison
            if not ok:
                raise WorkloadError(f"workload bounds: {name} = {value!r}; allowed: {allowed}")

    @property
    def recycle(self) -> bool:
        return self.duration_s is not None or self.max_requests is not None

    def shaped(self, turn: Turn) -> Turn | None:
        """The turn as sent (blocks rescaled), or None when `max_input_tokens` skips it."""
        bt = self.block_tokens
        if bt is not None and bt != turn.block_tokens:
            n_in = max(1, round(turn.input_tokens * bt / turn.block_tokens))
            turn = Turn(n_in, turn.output_tokens, turn.hash_ids, bt, turn.think_time_s,
                        turn.api_time_s, turn.t_s, turn.agent)
        if self.max_input_tokens is not None and turn.input_tokens > self.max_input_tokens:
            return None
        return turn

    def max_tokens(self, turn: Turn) -> int:
        cap = self.max_tokens_cap
        return turn.output_tokens if cap is None else min(turn.output_tokens, cap)

    def think_s(self, turn: Turn) -> float:
        """Idle gap before `turn` after its predecessor ended (trace time, before any
        time-scale of the server's clock)."""
        return min(turn.think_time_s * self.think_time_scale, self.think_time_cap_s)

    def is_warmup(self, warm_turn: bool, sent_before: int) -> bool:
        return warm_turn or sent_before < self.warmup_requests

    def request_cap_reached(self, profiled_sent: int) -> bool:
        return self.max_requests is not None and profiled_sent >= self.max_requests


def pass_namespace(session: Session, pass_no: int) -> str:
    """The hash namespace of a session's `pass_no`-th use (0 = its own)."""
    return session.namespace if pass_no == 0 else f"{session.namespace}#{pass_no}"


def pass_key(session: Session, pass_no: int) -> str:
    """The session id a pass is sent under (the correlation header, the records)."""
    return f"{session.session_id}#{pass_no}" if pass_no else session.session_id


class SessionPool:
    """Hands sessions to lanes in order, cycling when recycling is on."""

    def __init__(self, sessions: list[Session], recycle: bool, start: str, seed: int,
                 start_ratio: tuple[float, float] = (0.0, 1.0)) -> None:
        self.sessions = sessions
        self.start_ratio = start_ratio
        self.recycle = recycle
        self.sampled = start == "sampled"
        self.rng = random.Random(seed)
        self.next_index = 0
        self.started_lanes: set[int] = set()

    @classmethod
    def for_bounds(cls, sessions: list[Session], bounds: WorkloadBounds) -> SessionPool:
        """The pool; refused when `max_input_tokens` skips every turn (recycling lanes would
        otherwise look for a turn to send until the deadline, or forever), and when a turn as
        sent (its blocks rescaled) is longer than any model's context: the memory a request
        needs is bounded before any prompt is built."""
        sent = (t for s in sessions for x in s.turns if (t := bounds.shaped(x)) is not None)
        longest = max((t.input_tokens for t in sent), default=0)
        if longest > CONTEXT_TOKENS.hi:
            scaled = (f" (--block-tokens {bounds.block_tokens} rescales the trace's blocks)"
                      if bounds.block_tokens is not None else "")
            raise WorkloadError(
                f"a turn of {longest:,} tokens as sent{scaled} is longer than any model's "
                f"context (allowed: {CONTEXT_TOKENS.allowed()}: {CONTEXT_TOKENS.why})",
                hint="--max-input-tokens skips such turns")
        if bounds.max_input_tokens is not None and sessions and not any(
                bounds.shaped(t) is not None for s in sessions for t in s.turns):
            unbounded = dataclasses.replace(bounds, max_input_tokens=None)
            smallest = min(unbounded.shaped(t).input_tokens for s in sessions for t in s.turns)
            raise WorkloadError(
                f"--max-input-tokens {bounds.max_input_tokens} is below every turn's prompt "
                f"(the shortest is {smallest:,} tokens): nothing to send",
                hint="raise --max-input-tokens or leave it out")
        return cls(sessions, bounds.recycle, bounds.start, bounds.seed, bounds.start_ratio)

    def take(self, lane: int) -> tuple[Session, int, int] | None:
        """(session, pass number, first profiled turn) or None when every session is used."""
        i = self.next_index
        if i >= len(self.sessions) and not self.recycle:
            return None
        self.next_index += 1
        session = self.sessions[i % len(self.sessions)]
        start = 0
        if self.sampled and lane not in self.started_lanes:
            # a lane's first session starts at a random position, as if the run had been going
            start = self._sampled_start(session.num_turns)
        self.started_lanes.add(lane)
        return session, i // len(self.sessions), start

    def _sampled_start(self, num_turns: int) -> int:
        lo_ratio, hi_ratio = self.start_ratio
        if (lo_ratio, hi_ratio) == (0.0, 1.0):
            return self.rng.randrange(num_turns)
        lo = min(num_turns - 1, int(lo_ratio * num_turns))
        hi = min(num_turns - 1, max(lo, int(hi_ratio * num_turns)))
        return self.rng.randint(lo, hi)
