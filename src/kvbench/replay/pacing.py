"""How many request bytes the event loop writes, and how many prompt blocks it renders,
before it looks at anything else.

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
they asked.

Rendering is paced the same way, in blocks (`RENDER_PASS_BLOCKS`): 512 streams that each
render a slice of their next context in one pass made the longest passes of a 512-session
replay (a slice per stream, 56-73 ms a pass, the first second after the clock)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

# 2 MiB of bodies a budget, at most 4 MiB a loop pass: joining and writing them is a few
# milliseconds of copying, inside the replay's 10 ms loop-lag limit (replay/health.py)
PASS_BYTES = 2 << 20
# 64 blocks rendered a budget (~0.25 ms of 64-token blocks at ~4 us each), at most two a pass
RENDER_PASS_BLOCKS = 64


class PassBudget:
    """The units (bytes, blocks) counted since the budget's pass began; `admit` waits for
    room. A waiting caller sleeps on a future of its own: at each of the budget's passes the
    waiting ones that fit, in their order, are given the next pass (woken, their units
    counted in it), so a thousand waiting sends or renderings cost the loop nothing until
    their turn (they once each woke every pass to look, the start's 512 lanes a thousand
    task steps a pass)."""

    __slots__ = ("_armed", "_order", "_waiting", "deferred", "pass_bytes", "used")

    def __init__(self, pass_bytes: int = PASS_BYTES) -> None:
        self.pass_bytes = pass_bytes
        self.used = 0
        self._armed = False
        # (due ns or inf, ticket, size, the waiter's future): a heap
        self._waiting: list[tuple[float, int, int, asyncio.Future]] = []
        self._order = itertools.count()
        self.deferred = 0  # callers that waited for a later pass, in all

    def _fits(self, size_bytes: int) -> bool:
        return not self.used or self.used + size_bytes <= self.pass_bytes

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_pass)

    def _next_pass(self) -> None:
        """The budget's pass ends: the waiting callers that fit, in order, are woken into
        the next one (their tasks run in the loop's next pass, before this callback's own
        next call, which was scheduled after them)."""
        self.used = 0
        self._armed = False
        waiting = self._waiting
        while waiting:
            size, fut = waiting[0][2], waiting[0][3]
            if fut.done():  # cancelled while it waited
                heapq.heappop(waiting)
                continue
            if not self._fits(size):
                break
            heapq.heappop(waiting)
            fut.set_result(None)  # its task is scheduled now, before the `_arm` below
            self.used += size
        if self.used:
            self._arm()

    async def admit(self, size_bytes: int, due_ns: int | None = None) -> None:
        """Return when `size_bytes` may be spent (counting them): the caller spends them
        before its next await. `due_ns`: when the work is due (None: it has no schedule)."""
        if not self._waiting and self._fits(size_bytes):
            self._arm()
            self.used += size_bytes
            return
        self.deferred += 1
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (math.inf if due_ns is None else float(due_ns),
                                       next(self._order), size_bytes, fut))
        self._arm()
        await fut
