"""kvbench's request records in the AgentX harness's artifact layout: one
`profile_export.jsonl` line per request and the `profile_export_aiperf.json` aggregate, as
agentx-harness 1.0.12 (its bundled aiperf) writes them and InferenceX reads them.

- A line is AIPerf's `MetricRecordInfo` (aiperf/common/models/record_models.py:1648-1675):
  `metadata` (`MetricRecordMetadata`, :165-305: conversation and turn, wall-clock
  `request_start_ns` / `request_end_ns`, `benchmark_phase` warmup | profiling,
  `was_cancelled`), `metrics` as {tag: {value, unit}} in display units (ms, tokens) and
  `error` (`ErrorDetails`: code, type, message).
- Metric tags and formulas are AIPerf's: `time_to_first_token`, `request_latency` (send to
  the last token), `inter_token_latency` = (request_latency - TTFT) / (OSL - 1), defined from
  OSL 2 (aiperf/metrics/types/inter_token_latency_metric.py:16-55), `input_sequence_length`
  and `output_sequence_length` from the server's usage (the harness runs with
  `--use-server-token-count`).
- A request cut off at the end of the run is what AIPerf makes of one:
  `RequestCancellationError`, code 499, `was_cancelled` (aiperf/transports/
  aiohttp_client.py:286-296); InferenceX then counts it among the errors.
- The aggregate carries the counts InferenceX's result validation reads
  (utils/agentic/validation/validate_agentic_result.py:49-87: request_count,
  error_request_count, completed_request_count), the theoretical prefix-cache hit
  (request_metrics.py:331-348 reads sum / count) and `metadata` with the AgentX verdict
  (`scenario`, `submission_valid`, `submission_invalid_reasons`: aiperf/exporters/
  aggregate/aggregate_base_exporter.py:34-66).

kvbench stamps times with a monotonic clock; the export shifts them by one integer offset to
the run's wall-clock start (summary.json `run.started_unix_s`), so every duration is exact."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvbench.units import NS_PER_MS, NS_PER_S

AGENTX_SCENARIO = "inferencex-agentx-mvp"
WORKER = "kvbench"
CANCELLED = {"type": "RequestCancellationError", "code": 499,
             "message": "request cancelled at the end of the benchmark duration"}


def _ms(value: float) -> dict[str, Any]:
    return {"value": value, "unit": "ms"}


def _tokens(value: int) -> dict[str, Any]:
    return {"value": value, "unit": "tokens"}


def clock_offset_ns(records: list[dict[str, Any]], started_unix_s: float | None) -> int:
    """Integer ns to add to kvbench's monotonic stamps to put the first send at the run's
    wall-clock start (0 when the summary has none)."""
    sends = [r["t_send_ns"] for r in records if r.get("t_send_ns")]
    if not sends or not started_unix_s:
        return 0
    return round(started_unix_s * NS_PER_S) - min(sends)


def _error(r: dict[str, Any]) -> dict[str, Any] | None:
    status = r.get("status")
    if status == "ok":
        return None
    if status == "cancelled":
        return dict(CANCELLED)
    out: dict[str, Any] = {"type": r.get("error_kind") or "unknown",
                           "message": str(r.get("error") or status or "failed")}
    if r.get("http_status"):
        out["code"] = int(r["http_status"])
    return out


def record_line(r: dict[str, Any], index: int, offset_ns: int) -> dict[str, Any]:
    """One kvbench request record as an AIPerf `MetricRecordInfo`."""
    send = r["t_send_ns"]
    end = r.get("t_last_ns") or r.get("t_end_ns") or r.get("t_first_ns") or send
    metadata = {
        "session_num": int(r.get("lane") or 0),
        "x_request_id": str(r.get("request_id", index)),
        "x_correlation_id": str(r.get("session_id")),
        "conversation_id": str(r.get("session_id")),
        "turn_index": int(r.get("turn") or 0),
        "request_start_ns": send + offset_ns,
        "request_end_ns": end + offset_ns,
        "worker_id": WORKER,
        "record_processor_id": WORKER,
        "benchmark_phase": "warmup" if r.get("is_warmup") else "profiling",
        "was_cancelled": r.get("status") == "cancelled",
    }
    if metadata["was_cancelled"]:
        metadata["cancellation_time_ns"] = end + offset_ns
    metrics: dict[str, Any] = {}
    if r.get("status") == "ok" and r.get("t_first_ns"):
        ttft_ms = (r["t_first_ns"] - send) / NS_PER_MS
        latency_ms = (end - send) / NS_PER_MS
        osl = int(r.get("completion_tokens") or 0)
        metrics["time_to_first_token"] = _ms(ttft_ms)
        metrics["request_latency"] = _ms(latency_ms)
        if osl >= 2:
            metrics["inter_token_latency"] = _ms((latency_ms - ttft_ms) / (osl - 1))
        metrics["output_sequence_length"] = _tokens(osl)
        prompt = r.get("prompt_tokens") or r.get("sent_prompt_tokens")
        if prompt is not None:
            metrics["input_sequence_length"] = _tokens(int(prompt))
    return {"metadata": metadata, "metrics": metrics, "error": _error(r)}


def record_lines(records: Iterable[dict[str, Any]], offset_ns: int) -> list[dict[str, Any]]:
    return [record_line(r, i, offset_ns) for i, r in enumerate(records) if r.get("t_send_ns")]


def _count(value: int) -> dict[str, Any]:
    return {"unit": "requests", "avg": float(value)}


def profile_aggregate(lines: list[dict[str, Any]], records: list[dict[str, Any]],
                      submission: dict[str, Any] | None,
                      dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `profile_export_aiperf.json` fields InferenceX reads, for the profiled requests.
    `submission` is kvbench's AgentX verdict ({profile, submission_valid, reasons}) or None
    when the run was not judged by the AgentX profile: it is then no submission."""
    profiled = [x for x in lines if x["metadata"]["benchmark_phase"] == "profiling"]
    errors = sum(1 for x in profiled if x["error"])
    ok = len(profiled) - errors
    out: dict[str, Any] = {"request_count": _count(ok), "error_request_count": _count(errors),
                           "completed_request_count": _count(ok + errors)}
    ideal = sent = 0
    for r in records:
        if not r.get("is_warmup") and r.get("status") == "ok" and \
                r.get("ideal_cached_tokens") is not None and r.get("sent_prompt_tokens"):
            ideal += r["ideal_cached_tokens"]
            sent += r["sent_prompt_tokens"]
    if sent:
        out["theoretical_prefix_cache_hit"] = {"unit": "%", "avg": 100.0 * ideal / sent,
                                               "sum": float(ideal), "count": sent}
    metadata: dict[str, Any] = {}
    if dataset:
        metadata["dataset"] = dataset
    if submission is not None:
        metadata.update(scenario=AGENTX_SCENARIO,
                        submission_valid=bool(submission.get("submission_valid")))
        if submission.get("reasons"):
            metadata["submission_invalid_reasons"] = list(submission["reasons"])
    else:
        metadata.update(submission_valid=False,
                        submission_invalid_reasons=["not_run_under_the_agentx_profile"])
    out["metadata"] = metadata
    return out
