"""The client watching itself: event-loop lag and CPU use, so a number produced by an
overloaded client is flagged instead of trusted."""

from __future__ import annotations

import asyncio
import contextlib
import time
from time import perf_counter_ns

# 100 probes a second: a 2 s quickstart run had 40 at 20 a second, whose p99 was its single
# worst wake-up (one preemption by another process flagged the run); the probes cost ~0.1%
# of a core
PROBE_S = 0.01
LAG_MS_LIMIT = 10.0
LATENESS_MS_LIMIT = 10.0
CPU_LIMIT = 0.9  # of one core


class LoopMonitor:
    """Sleeps PROBE_S at a time and records how late each wake-up was."""

    def __init__(self) -> None:
        self.lag_ns: list[int] = []
        self._task: asyncio.Task | None = None
        self._cpu0 = 0.0
        self._wall0 = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0

    async def _run(self) -> None:
        want = int(PROBE_S * 1e9)
        while True:
            t0 = perf_counter_ns()
            await asyncio.sleep(PROBE_S)
            self.lag_ns.append(max(0, perf_counter_ns() - t0 - want))

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), perf_counter_ns()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is None:  # never started (the run ended while it prepared)
            return
        self.cpu_s = time.process_time() - self._cpu0
        self.wall_s = (perf_counter_ns() - self._wall0) / 1e9
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def report(self) -> dict:
        return {
            "loop_lag_ns": list(self.lag_ns),
            "cpu_s": round(self.cpu_s, 3),
            "wall_s": round(self.wall_s, 3),
        }
