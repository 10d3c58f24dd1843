"""How many request bytes one pass of the event loop may write.

Every task the loop finds ready runs in one pass (CPython 3.11.7 Lib/asyncio/base_events.py:1905
`_run_once` runs the `ntodo` callbacks ready when it starts; uvloop 0.23.0 loop.pyx:448
`_on_idle` does the same), so 512 lanes whose turns fall due together would each join and
write a 0.7-5 MB body in a single pass: seconds in which no response byte is timestamped and
no other send leaves (the loop lag a replay of AgentX-sized prompts measured). A send asks
the budget first; past `pass_bytes` in this pass it yields to the next one, where the rest of
the loop (reads, timers, other sends) has run in between. A body larger than the budget goes
alone in its pass."""

from __future__ import annotations

import asyncio

# 4 MiB of bodies a pass: joining and writing them is a few milliseconds of copying, inside
# the replay's 10 ms loop-lag limit (replay/health.py LAG_MS_LIMIT)
PASS_BYTES = 4 << 20


class PassBudget:
    """The bytes written in the current loop pass; `admit` waits for a pass with room."""

    __slots__ = ("_armed", "deferred", "pass_bytes", "used")

    def __init__(self, pass_bytes: int = PASS_BYTES) -> None:
        self.pass_bytes = pass_bytes
        self.used = 0
        self._armed = False
        self.deferred = 0  # sends that waited for a later pass, in all

    def _next_pass(self) -> None:
        self.used = 0
        self._armed = False

    async def admit(self, size_bytes: int) -> None:
        """Return in a pass that has room for `size_bytes` (or is empty), counting them: the
        caller writes them before its next await."""
        if self.used and self.used + size_bytes > self.pass_bytes:
            self.deferred += 1
            while self.used and self.used + size_bytes > self.pass_bytes:
                await asyncio.sleep(0)
        if not self._armed:
            # scheduled now, this runs at the start of the next pass: before the sends that
            # yield after it in this one (callbacks run in the order they were scheduled)
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_pass)
        self.used += size_bytes
