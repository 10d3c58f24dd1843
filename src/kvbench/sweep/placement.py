"""Where the quickstart's load client and embedded engine run: on the cores other work leaves
idle, and ahead of that work where the OS allows it.

On two cores with one kept busy by another program, the client (this process) and the engine
(its child) shared the busy core with it: the scheduler let the client's timers fire 10-28 ms
late (loop lag p99), which the validity checks flag as a saturated client, in 17 of 18 runs.
Kept on the idle core, at a higher priority than the other work, the same machine gave 5-6 of
6 valid cells (docs/performance.md, "The quickstart on a busy machine"). Both settings are
inherited by the engine process, and both are said: a benchmark that moves itself must say
where it went."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# a core this busy (share of its time, over the sample) is another program's
BUSY_SHARE = 0.5
SAMPLE_S = 0.3
# the priority the client and engine ask for (nice; below 0 needs root or CAP_SYS_NICE)
PRIORITY_NICE = -10
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True, slots=True)
class Placement:
    cpus: tuple[int, ...] | None  # the cores kept to, or None: left as they were
    busy: dict[int, float]  # each allowed core's busy share over the sample
    nice: int | None  # the priority set, or None: left as it was

    def line(self) -> str:
        busy = ", ".join(f"CPU {c} {share:.0%}" for c, share in sorted(self.busy.items()))
        where = (f"client and engine kept to CPU {', '.join(map(str, self.cpus))} (busy: {busy})"
                 if self.cpus else f"client and engine on any CPU (busy: {busy or 'unknown'})")
        prio = (f"priority nice {self.nice}" if self.nice is not None else
                "priority unchanged (a higher one needs root or CAP_SYS_NICE)")
        return f"placement: {where}; {prio}"


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Per core, (busy, total) jiffies from /proc/stat (idle and iowait are not busy)."""
    out = {}
    for line in PROC_STAT.read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(f) for f in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out[int(name[3:])] = (sum(ticks) - idle, sum(ticks))
    return out


def cpu_busy(sample_s: float = SAMPLE_S) -> dict[int, float]:
    """Each core's busy share over `sample_s`; {} where /proc/stat cannot be read."""
    try:
        before = _cpu_times()
        time.sleep(sample_s)
        after = _cpu_times()
    except (OSError, ValueError, IndexError):
        return {}
    return {c: (after[c][0] - b[0]) / max(1, after[c][1] - b[1])
            for c, b in before.items() if c in after}


def place(sample_s: float = SAMPLE_S) -> Placement:
    """Keep this process (and the processes it starts) to the idle cores among those it may
    use, when some are busy and some idle; ask for PRIORITY_NICE."""
    cpus = None
    busy: dict[int, float] = {}
    if hasattr(os, "sched_getaffinity"):
        allowed = os.sched_getaffinity(0)
        busy = {c: share for c, share in cpu_busy(sample_s).items() if c in allowed}
        idle = tuple(sorted(c for c in allowed if busy.get(c, 1.0) < BUSY_SHARE))
        if idle and len(idle) < len(allowed):
            os.sched_setaffinity(0, idle)
            cpus = idle
    nice = None
    try:
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        if nice > PRIORITY_NICE:  # never lower a priority someone raised further
            os.setpriority(os.PRIO_PROCESS, 0, PRIORITY_NICE)
            nice = PRIORITY_NICE
    except (PermissionError, AttributeError, OSError):
        nice = None
    return Placement(cpus, busy, nice)
