"""Idle caps: when nothing in a scope has a request in flight or one ready to send (every
task of it is waiting out a think time), all of the scope's pending timers shift together so
that the next request leaves within the cap. A recorded hour-long pause then costs the run at
most the cap, while the order and spacing of the pending sends is kept.

Two scopes, as InferenceX AgentX runs them (SemiAnalysisAI/agentx-harness 1.0.12):
- the whole run, `--system-idle-gap-cap-seconds 10` ("Pending request timers shift uniformly
  only when no request is active": aiperf/timing/strategies/agentic_replay.py
  `enforce_system_idle_cap`);
- each session tree, `--trace-idle-gap-cap-seconds 300` (InferenceX 843c6254f
  benchmarks/benchmark_lib.sh `build_replay_cmd`: "Limit observed end-to-start idle time
  across each complete trajectory tree, including root and subagent streams ... advances that
  tree's pending timers uniformly").

A task belongs to one or more scopes: it is awake (sending, reading a response) or asleep
until a target; a sleeper is due at its target less every shift made, in any of its scopes,
since it fell asleep."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from time import perf_counter_ns


class _Sleeper:
    __slots__ = ("bases", "caps", "target_ns", "woken")

    def __init__(self, target_ns: int, caps: Sequence[IdleCap]) -> None:
        self.target_ns = target_ns
        self.caps = caps
        self.bases = [c.shift_ns for c in caps]  # each scope's shifts before it slept
        self.woken = asyncio.Event()

    def due_ns(self) -> int:
        return self.target_ns - sum(c.shift_ns - b for c, b in zip(self.caps, self.bases,
                                                                    strict=True))


class IdleCap:
    """One scope; `shift_ns` is how far its timers have moved in all. `on_shift` hears each
    shift: the scope's timers that are no task's (a root waiting on its subagents, whose
    own due time the harness keeps as a timer of the tree's group and shifts with the rest:
    aiperf/timing/branch_orchestrator.py `_arm_join_replay_deadline`,
    common/loop_scheduler.py `cap_pending_delay_for_group`)."""

    __slots__ = ("_sleepers", "awake", "cap_ns", "on_shift", "shift_ns", "shifts")

    def __init__(self, cap_s: float, on_shift: Callable[[int], None] | None = None) -> None:
        self.cap_ns = int(cap_s * 1e9)
        self.shift_ns = 0
        self.shifts = 0
        self.awake = 0
        self.on_shift = on_shift
        self._sleepers: set[_Sleeper] = set()

    def _maybe_shift(self) -> None:
        if self.awake > 0 or not self._sleepers:
            return
        now = perf_counter_ns()
        gap = min(s.due_ns() for s in self._sleepers) - now - self.cap_ns
        if gap > 0:
            self.shift_ns += gap
            self.shifts += 1
            if self.on_shift is not None:
                self.on_shift(gap)
            for s in self._sleepers:
                s.woken.set()  # every sleeper recomputes its due time


def enter(caps: Sequence[IdleCap]) -> None:
    """A task of these scopes starts (it is awake)."""
    for c in caps:
        c.awake += 1


def leave(caps: Sequence[IdleCap]) -> None:
    """A task of these scopes ends."""
    for c in caps:
        c.awake -= 1
        c._maybe_shift()


async def sleep_until(caps: Sequence[IdleCap], target_ns: int, deadline_ns: int | None) -> int:
    """Sleep until `target_ns`, less the shifts made meanwhile, or the deadline; returns the
    target as it finally stood (when the send was due)."""
    me = _Sleeper(target_ns, caps)
    for c in caps:
        c._sleepers.add(me)
        c.awake -= 1
    try:
        for c in caps:
            c._maybe_shift()
        while True:
            due = me.due_ns()
            end = due if deadline_ns is None else min(due, deadline_ns)
            now = perf_counter_ns()
            if end <= now:
                return due
            me.woken.clear()
            with contextlib.suppress(TimeoutError):  # the due time, or a shift woke it
                await asyncio.wait_for(me.woken.wait(), (end - now) / 1e9)
    finally:
        for c in caps:
            c._sleepers.discard(me)
            c.awake += 1
