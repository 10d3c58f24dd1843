"""How many request bytes the event loop writes before it looks at anything else.

Every task the loop finds ready runs in one pass (CPython 3.11.7 Lib/asyncio/base_events.py
:1905 `_run_once` runs the `ntodo` callbacks ready when it starts; uvloop 0.23.0 loop.pyx:448
`_on_idle` does the same), so 512 lanes whose turns fall due together would each join and
write a 0.7-5 MB body in a single pass: seconds in which no response byte is timestamped and
no other send leaves (the loop lag a replay of AgentX-sized prompts measured). A send asks
the budget first; past `pass_bytes` it waits for a later pass, so the reads, timers and other
sends of the loop run in between. A body larger than the budget goes alone.

The budget's pass ends at a callback scheduled when its first send is counted; that callback
runs in the loop's next pass, after whatever that pass runs before it, so one pass of the loop
holds at most two of the budget's: at most 2 x `pass_bytes` written (or one body larger
than that, alone).

Sends that wait leave by their schedule: those due earliest first, and those that have no
schedule (a session's first turn) after every send that has one; among equals, in the order
they asked."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

# 2 MiB of bodies a budget, at most 4 MiB a loop pass: joining and writing them is a few
# milliseconds of copying, inside the replay's 10 ms loop-lag limit (replay/health.py)
PASS_BYTES = 2 << 20


class PassBudget:
    """The bytes counted since the budget's pass began; `admit` waits for room."""

    __slots__ = ("_armed", "_order", "_waiting", "deferred", "pass_bytes", "used")

    def __init__(self, pass_bytes: int = PASS_BYTES) -> None:
        self.pass_bytes = pass_bytes
        self.used = 0
        self._armed = False
        self._waiting: list[tuple[float, int]] = []  # (due ns or inf, ticket): a heap
        self._order = itertools.count()
        self.deferred = 0  # sends that waited for a later pass, in all

    def _fits(self, size_bytes: int) -> bool:
        return not self.used or self.used + size_bytes <= self.pass_bytes

    def _next_pass(self) -> None:
        self.used = 0
        self._armed = False

    def _count(self, size_bytes: int) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_pass)
        self.used += size_bytes

    async def admit(self, size_bytes: int, due_ns: int | None = None) -> None:
        """Return when `size_bytes` may be written (counting them): the caller writes them
        before its next await. `due_ns`: when the send is due (None: it has no schedule)."""
        if not self._waiting and self._fits(size_bytes):
            self._count(size_bytes)
            return
        self.deferred += 1
        me = (math.inf if due_ns is None else float(due_ns), next(self._order))
        heapq.heappush(self._waiting, me)
        try:
            while self._waiting[0] != me or not self._fits(size_bytes):
                await asyncio.sleep(0)
        finally:
            if self._waiting and self._waiting[0] == me:
                heapq.heappop(self._waiting)
            else:  # cancelled while waiting behind others
                self._waiting.remove(me)
                heapq.heapify(self._waiting)
        self._count(size_bytes)
