"""How `kvbench simulate` drives its traces: closed loop at a stated concurrency unless
--open-loop, and the verdict on an open-loop run that fell behind the trace."""

from __future__ import annotations

import sys

from kvbench.errors import SimError

DEFAULT_SIM_CONCURRENCY = 8
# An open-loop run "keeps up" when requests are admitted within this median wait and the last
# one finishes within this share of the trace's span (plus a minute) after the last arrival.
KEEP_UP_QUEUE_S = 10.0
KEEP_UP_TAIL = 0.2


def loop_mode(concurrency: int | None, open_loop: bool, arrival_scale: float) -> int | None:
    """Closed loop at a stated concurrency unless --open-loop; said on stderr either way."""
    if open_loop and concurrency is not None:
        raise SimError("give --concurrency (closed loop) or --open-loop, not both")
    if not open_loop and arrival_scale != 1.0:
        raise SimError("--arrival-scale is for --open-loop runs")
    if open_loop:
        print(f"open loop: requests at the trace's times x{arrival_scale:g}", file=sys.stderr)
        return None
    lanes = concurrency if concurrency is not None else DEFAULT_SIM_CONCURRENCY
    print(f"closed loop: {lanes} session lanes (--concurrency N to change, --open-loop for the "
          "trace's own times)", file=sys.stderr)
    return lanes


def judge_open_loop(summary: dict, traces: list, arrival_scale: float) -> None:
    """Mark (and say) an open-loop run whose server fell behind the trace: its latencies are
    a growing backlog, not the engine's."""
    arrivals = [t.arrival_s * arrival_scale for tr in traces for sess in tr.sessions
                for t in sess]
    span = (max(arrivals) - min(arrivals)) if arrivals else 0.0
    tail = summary["duration_s"] - span
    queue_p50 = (summary["queue_ms"]["p50"] or 0) / 1e3
    behind = queue_p50 > KEEP_UP_QUEUE_S or tail > KEEP_UP_TAIL * span + 60
    summary["open_loop"] = {"kept_up": not behind, "arrival_span_s": span,
                            "finished_after_last_arrival_s": tail, "queue_p50_s": queue_p50}
    if behind:
        print(f"open loop fell behind the trace: the median request waited {queue_p50:,.0f} s "
              f"for admission and the last finished {tail:,.0f} s after the last arrival "
              f"(trace span {span:,.0f} s); latencies are a backlog. Stretch arrivals "
              "(--arrival-scale > 1) or run closed loop (--concurrency N)", file=sys.stderr)
