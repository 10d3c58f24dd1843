"""Request accounting and request metrics from the replay summary (replay/stats.py)."""

from __future__ import annotations

from typing import Any

LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "interactivity_tok_s")


def request_accounting(summary: dict[str, Any] | None) -> dict[str, Any]:
    """Reference names: records_total, records_profiled, records_warmup_dropped,
    records_error_dropped, error_categories; plus the attempted count errors are judged by."""
    req = (summary or {}).get("requests") or {}
    total = int(req.get("total", 0))
    profiled = int(req.get("profiled", 0))
    warmup = int(req.get("warmup", 0))
    errors = int(req.get("errors", 0))
    # Replay counts successes as `profiled`; requests still in flight when the window closed
    # are `cancelled`: neither a success nor a failure, so they do not count as attempted.
    cancelled = int(req.get("cancelled", 0))
    attempted = profiled + errors
    return {
        "records_total": total,
        "records_profiled": profiled,
        "records_attempted": attempted,
        "records_successful": profiled,
        "records_cancelled": cancelled,
        "records_warmup_dropped": warmup,
        "records_error_dropped": errors,
        "records_dropped_total": warmup + errors,
        "error_categories": dict(req.get("errors_by_kind") or {}),
    }


def request_metrics(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if not summary:
        return None
    return {
        "latency": {k: summary.get(k) for k in LATENCIES},
        "throughput": summary.get("throughput"),
        "window_s": summary.get("window_s"),
        "cache": summary.get("cache"),
        # >1: the server's clock ran faster than wall time; figures above are in its time
        "time_scale": summary.get("time_scale", 1.0),
    }
