"""The window a run's server counters are counted over: the profiling phase.

A replay that warms up first (the AgentX profile: the t* requests, then one-token requests per
lane) sends requests before its profiling phase, and the engine counts them like any other.
AIPerf leaves them out of its server metrics: the profiling window starts at the profiling
phase, and the last snapshot taken before that start is the baseline of every counter's
increase (agentx-harness 1.0.12, aiperf/server_metrics/accumulator.py:78-80, 181-199).
InferenceX's cache-reuse rates are read from that export, so kvbench counts the same window;
a run without a warm-up counts from its pre-run snapshot, as before."""

from __future__ import annotations

from typing import Any

from kvbench.units import NS_PER_S

PROFILING_START = "profiling_start"  # the phase of the snapshot at a warm-up's end


def profiling_start_unix_ns(summary: dict[str, Any] | None) -> int | None:
    """When a replay's profiling phase began on the wall clock the scrape is stamped with,
    from its summary: the run's wall-clock start (taken as its first request went out:
    export/aiperf.py `clock_offset_ns` maps the records the same way) plus the preparation
    and the warm-up before the phase. None where no warm-up request went out before the
    phase (the whole run is the phase) or the summary does not say."""
    summary = summary or {}
    run = summary.get("run") or {}
    started, warmup_s = run.get("started_unix_s"), run.get("warmup_s")
    if not (summary.get("requests") or {}).get("warmup") or not started or not warmup_s \
            or warmup_s <= 0:
        return None
    return round((started + (run.get("prepare_s") or 0.0) + warmup_s) * NS_PER_S)


def counted_snapshots(ok: list[dict[str, Any]], from_unix_ns: int | None
                      ) -> list[dict[str, Any]]:
    """The good snapshots, in order, that counters are counted over: all of them, or, from
    `from_unix_ns` (the profiling start), a baseline and every later one. The baseline is the
    snapshot the replay took as its warm-up ended (phase `profiling_start`, scraper.py), as
    AIPerf scrapes at the end of its warm-up; lacking one (a sharded replay, a run from before
    it), the last snapshot taken at or before the start, up to one scrape interval early, so
    that much of the warm-up's end is counted."""
    if from_unix_ns is None:
        return ok
    marked = [i for i, s in enumerate(ok) if s.get("phase") == PROFILING_START]
    if not marked:
        base = max((i for i, s in enumerate(ok) if s["t_ns"] <= from_unix_ns), default=0)
        return ok[base:]
    # a periodic scrape sent before the marked one may be written after it: it belongs to
    # the warm-up (and, counted after the baseline, its lower counters would read as a reset)
    base = ok[marked[-1]]
    return [base, *(s for s in ok[marked[-1] + 1:] if s["t_ns"] >= base["t_ns"])]
