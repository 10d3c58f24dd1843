"""The system idle cap: when no lane has a request in flight or one ready to send (every live
lane is waiting out a think time), all pending think times shift together so that the next
request leaves within the cap. A recorded hour-long pause then costs the run at most the cap
when nothing else is going on, while the order and spacing of the pending sends is kept.
This is InferenceX AgentX's `--system-idle-gap-cap-seconds 10` ("Pending request timers
shift uniformly only when no request is active": SemiAnalysisAI/agentx-harness
src/aiperf/common/scenario/base.py `system_idle_gap_cap_seconds`, 6f666ba0)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from time import perf_counter_ns


class SystemIdleCap:
    """Shared by the lanes of one replay: each lane is awake (sending, rendering, reading a
    response) or asleep until a target time; `shift_ns` is how far every target has moved."""

    __slots__ = ("_awake", "_ids", "_sleeping", "_wake", "cap_ns", "shift_ns", "shifts")

    def __init__(self, cap_s: float) -> None:
        self.cap_ns = int(cap_s * 1e9)
        # every shift so far, in total: a timer set when the total was b is due at its
        # target less (shift_ns - b); timers set after a shift are not moved by it
        self.shift_ns = 0
        self.shifts = 0
        self._awake = 0
        self._sleeping: dict[int, int] = {}  # sleeper id -> target + shift_ns when it slept
        self._ids = itertools.count()
        self._wake = asyncio.Event()

    def lane_started(self) -> None:
        self._awake += 1

    def lane_ended(self) -> None:
        self._awake -= 1
        self._maybe_shift()

    async def sleep_until(self, target_ns: int, deadline_ns: int | None) -> int:
        """Sleep until `target_ns` (less the shifts made meanwhile) or the deadline; returns
        the target as it finally stood, the time the send was due."""
        me = next(self._ids)
        anchor = target_ns + self.shift_ns
        self._sleeping[me] = anchor
        self._awake -= 1
        try:
            self._maybe_shift()
            while True:
                now = perf_counter_ns()
                due = anchor - self.shift_ns
                end = due if deadline_ns is None else min(due, deadline_ns)
                if end <= now:
                    return due
                with contextlib.suppress(TimeoutError):  # the due time, or a shift woke it
                    await asyncio.wait_for(self._wake.wait(), (end - now) / 1e9)
        finally:
            del self._sleeping[me]
            self._awake += 1

    def _maybe_shift(self) -> None:
        if self._awake > 0 or not self._sleeping:
            return
        now = perf_counter_ns()
        soonest = min(self._sleeping.values()) - self.shift_ns
        gap = soonest - now - self.cap_ns
        if gap > 0:
            self.shift_ns += gap
            self.shifts += 1
            self._wake.set()  # every sleeper recomputes its due time
            self._wake = asyncio.Event()
