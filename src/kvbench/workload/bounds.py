"""Workload bounds: which requests a closed-loop run sends, shared by `kvbench replay` (wall
clock, HTTP) and `kvbench simulate` (virtual time), so one command line describes a
measurement and a prediction of the same requests.

Lanes take sessions in order (lane i's first session is session i, later ones go to whichever
lane frees first; `order="shuffled"`: in an order drawn from the seed); with a duration or
request bound, sessions are recycled, each pass in a fresh hash namespace (a recycled session
cannot hit what its previous pass cached), or, with `tree_markers` (the AgentX profile), in
the session's own namespace behind a marker of its own (it shares what precedes the marker).
Sessions whose peak context (prompt plus requested output) exceeds `max_context_tokens` are
dropped whole before the run, as InferenceX drops them (`--max-context-length`). With
`start="sampled"` a lane's first session starts at an instant t* of its recording, its live
streams' previous requests sent as warm-up (workload/tree.py `first_start`); with
`warmup_per_lane` each lane then sends that many more one-token requests with no idle delay
before the profiling phase (the harness's cache-pressure warm-up). Per turn: the trace's
blocks rescaled to `block_tokens`, turns above `max_input_tokens` skipped, output capped at
`max_tokens_cap`, think time scaled then capped. The first `warmup_requests` requests sent are
warm-up too; `max_requests` counts profiled requests only."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from kvbench.bounds import CONTEXT_TOKENS
from kvbench.errors import WorkloadError
from kvbench.units import MAX_SESSION_LANES
from kvbench.workload.session import Session, Turn

START_MODES = ("beginning", "sampled")
# the order lanes take sessions in: the trace's, or shuffled by the seed (a repeat of a run on
# a deterministic engine then samples another mix of sessions side by side)
ORDERS = ("trace", "shuffled")


@dataclass(frozen=True, slots=True)
class WorkloadBounds:
    concurrency: int = 1
    duration_s: float | None = None
    max_requests: int | None = None
    warmup_requests: int = 0
    max_tokens_cap: int | None = None
    think_time_cap_s: float | None = 60.0  # None: no cap on one gap (AgentX forbids one)
    think_time_scale: float = 1.0
    start: str = "beginning"
    # with start="sampled": the share of each trace the first profiled turn is drawn from
    # (AgentX: 25-75%, --trajectory-start-min/max-ratio); (0, 1) is any turn
    start_ratio: tuple[float, float] = (0.0, 1.0)
    seed: int = 0
    order: str = "trace"
    block_tokens: int | None = None
    max_input_tokens: int | None = None
    # in-flight requests at the deadline may finish within this; the rest are cancelled
    grace_s: float = 30.0
    # one-token requests per lane after the t* warm-up requests (AgentX: 10)
    warmup_per_lane: int | None = None
    # whole sessions whose peak prompt + output exceeds this are dropped before the run
    max_context_tokens: int | None = None
    # the idle caps (replay/idle.py), in the profiling phase: a tree, the whole run
    tree_idle_cap_s: float | None = None
    system_idle_cap_s: float | None = None
    # each chat prompt opens its first user message with the harness's cache-bust marker, one
    # per session tree (workload/prompt.py `tree_marker`), in place of kvbench's run marker:
    # taken from replay/profile.py `chat_prompts`, the one decision of it, by whoever makes
    # the bounds (replay/config.py, cli/sim.py, capacity/jobs.py). Every pass then renders
    # the trace's own namespace (`pass_namespace`): the blocks before the marker are shared
    # across trees, those after it only within one
    tree_markers: bool = False

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
            ("think_time_cap_s", self.think_time_cap_s,
             self.think_time_cap_s is None or self.think_time_cap_s >= 0, ">= 0"),
            ("think_time_scale", self.think_time_scale, self.think_time_scale >= 0, ">= 0"),
            ("start", self.start, self.start in START_MODES, " | ".join(START_MODES)),
            ("order", self.order, self.order in ORDERS, " | ".join(ORDERS)),
            ("block_tokens", self.block_tokens,
             self.block_tokens is None or self.block_tokens >= 1, ">= 1"),
            ("max_input_tokens", self.max_input_tokens,
             self.max_input_tokens is None or self.max_input_tokens >= 1, ">= 1"),
            ("grace_s", self.grace_s, self.grace_s >= 0, ">= 0"),
            ("start_ratio", self.start_ratio,
             0 <= self.start_ratio[0] <= self.start_ratio[1] <= 1, "0 <= low <= high <= 1"),
            ("warmup_per_lane", self.warmup_per_lane,
             self.warmup_per_lane is None or self.warmup_per_lane >= 0, ">= 0"),
            ("max_context_tokens", self.max_context_tokens,
             self.max_context_tokens is None or self.max_context_tokens >= 1, ">= 1"),
            ("tree_idle_cap_s", self.tree_idle_cap_s,
             self.tree_idle_cap_s is None or self.tree_idle_cap_s > 0, "> 0"),
            ("system_idle_cap_s", self.system_idle_cap_s,
             self.system_idle_cap_s is None or self.system_idle_cap_s > 0, "> 0"),
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
        gap = turn.think_time_s * self.think_time_scale
        return gap if self.think_time_cap_s is None else min(gap, self.think_time_cap_s)

    def is_warmup(self, warm_turn: bool, sent_before: int) -> bool:
        return warm_turn or sent_before < self.warmup_requests

    def request_cap_reached(self, profiled_sent: int) -> bool:
        return self.max_requests is not None and profiled_sent >= self.max_requests


def pass_namespace(session: Session, pass_no: int, tree_marker: bool = False) -> str:
    """The hash namespace of a session's `pass_no`-th use (0 = its own); with a tree marker
    (`WorkloadBounds.tree_markers`) every pass's is the session's own: the marker alone keeps
    one pass's prompts from another's past the blocks before it."""
    fresh = pass_no and not tree_marker
    return f"{session.namespace}#{pass_no}" if fresh else session.namespace


def pass_key(session: Session, pass_no: int) -> str:
    """The session id a pass is sent under (the correlation header, the records)."""
    return f"{session.session_id}#{pass_no}" if pass_no else session.session_id


class SessionPool:
    """Hands sessions to lanes in order, cycling when recycling is on."""

    def __init__(self, sessions: list[Session], recycle: bool, dropped: int = 0) -> None:
        self.sessions = sessions
        self.recycle = recycle
        self.dropped = dropped  # sessions over the context limit, left out
        self.next_index = 0

    @classmethod
    def for_bounds(cls, sessions: list[Session], bounds: WorkloadBounds) -> SessionPool:
        """The pool, without the sessions over `max_context_tokens`; refused when nothing is
        left to send (recycling lanes would otherwise look for a turn until the deadline, or
        forever), and when a turn as sent (its blocks rescaled) is longer than any model's
        context: the memory a request needs is bounded before any prompt is built."""
        limit = bounds.max_context_tokens
        kept = sessions if limit is None else [
            s for s in sessions if s.peak_context_tokens() <= limit]
        if sessions and not kept:
            smallest = min(s.peak_context_tokens() for s in sessions)
            raise WorkloadError(
                f"--max-context-length {limit} drops every session (the smallest peak "
                f"prompt + output is {smallest:,} tokens): nothing to send",
                hint="the server's context length is below every trace")
        sent = (t for s in kept for x in s.turns if (t := bounds.shaped(x)) is not None)
        longest = max((t.input_tokens for t in sent), default=0)
        if longest > CONTEXT_TOKENS.hi:
            scaled = (f" (--block-tokens {bounds.block_tokens} rescales the trace's blocks)"
                      if bounds.block_tokens is not None else "")
            raise WorkloadError(
                f"a turn of {longest:,} tokens as sent{scaled} is longer than any model's "
                f"context (allowed: {CONTEXT_TOKENS.allowed()}: {CONTEXT_TOKENS.why})",
                hint="--max-input-tokens skips such turns")
        if bounds.max_input_tokens is not None and kept and not any(
                bounds.shaped(t) is not None for s in kept for t in s.turns):
            unbounded = dataclasses.replace(bounds, max_input_tokens=None)
            smallest = min(unbounded.shaped(t).input_tokens for s in kept for t in s.turns)
            raise WorkloadError(
                f"--max-input-tokens {bounds.max_input_tokens} is below every turn's prompt "
                f"(the shortest is {smallest:,} tokens): nothing to send",
                hint="raise --max-input-tokens or leave it out")
        if bounds.order == "shuffled":
            kept = list(kept)
            random.Random(bounds.seed).shuffle(kept)
        return cls(kept, bounds.recycle, len(sessions) - len(kept))

    def take(self) -> tuple[Session, int] | None:
        """(session, pass number) or None when every session is used."""
        i = self.next_index
        if not self.sessions or (i >= len(self.sessions) and not self.recycle):
            return None
        self.next_index += 1
        return self.sessions[i % len(self.sessions)], i // len(self.sessions)
