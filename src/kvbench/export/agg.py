"""The aggregate JSON InferenceX's agentic aggregator writes for one point (`agg_*.json`, the
`bmk_agentic_*` artifact its dashboard ingests), computed by kvbench from the same files it
exports, in InferenceX's names and units (seconds, tokens per second, fractions):
InferenceX 843c6254f, utils/agentic/aggregation/process_agentic_result.py:194-274
(`build_agg`), request_metrics.py:187-393, server_metrics.py:32-71.

Statistics are those of request_metrics.py / aggregation_common.py:11-33: per profiled
successful request, mean, linearly interpolated p50/p75/p90/p95 and the population standard
deviation; ITL is AIPerf's per-request (E2E - TTFT) / (OSL - 1) and TPOT the same series;
interactivity is 1 / the ITL statistic; E2E-normalised interactivity 1 / the statistic of
E2E / OSL. kvbench's own result.json keeps its own definitions (per-token ITL gaps, TPOT
after the first chunk, interactivity per request), in ms under its own names; TTFT and E2E
are the same samples in both. Floats are rounded as the aggregator rounds them (5 decimals,
integral values >= 1 as integers: aggregation_common.py:71-84)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from kvbench.export.pool import pool_tokens
from kvbench.metrics.inferencex import backend_of, empty_server_metrics, server_metrics

_PCTS = (50, 75, 90, 95)


def _percentile(ordered: list[float], p: float) -> float:
    """Linear interpolation between the closest ranks of sorted data."""
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    if lo + 1 >= len(ordered):
        return ordered[lo]
    return ordered[lo] + (k - lo) * (ordered[lo + 1] - ordered[lo])


def stats(values: list[float]) -> dict[str, float]:
    """{mean, p50, p75, p90, p95, std} of the values; {} when there are none."""
    if not values:
        return {}
    ordered = sorted(values)
    out = {"mean": statistics.mean(values)}
    out.update({f"p{p}": _percentile(ordered, p) for p in _PCTS})
    out["std"] = statistics.pstdev(values) if len(values) > 1 else 0.0
    return out


def _inverse(of: dict[str, float], samples: list[float]) -> dict[str, float]:
    """1 / each positive statistic, and the spread of the per-request inverses."""
    out = {k: 1.0 / v for k in ("mean", "p50", "p75", "p90", "p95")
           if isinstance(v := of.get(k), int | float) and v > 0}
    inverses = [1.0 / v for v in samples if v > 0]
    if inverses:
        out["std"] = statistics.pstdev(inverses) if len(inverses) > 1 else 0.0
    return out


def _values(lines: list[dict[str, Any]], tag: str) -> list[float]:
    out = []
    for line in lines:
        metric = line["metrics"].get(tag)
        if metric is not None and metric.get("value") is not None:
            out.append(float(metric["value"]))
    return out


def _seconds(ms: list[float]) -> list[float]:
    return [v / 1000.0 for v in ms if math.isfinite(v) and v > 0]


def _qps(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Completions per 1 s window, windows laid from the first completion while a whole one
    fits before the last (request_metrics.py:237-269)."""
    ends = sorted(x["metadata"]["request_end_ns"] / 1e9 for x in lines
                  if x["metadata"].get("request_end_ns"))
    if len(ends) < 2 or ends[-1] - ends[0] <= 0:
        return {}
    counts, start = [], ends[0]
    while start + 1.0 <= ends[-1]:
        counts.append(float(sum(1 for t in ends if start <= t < start + 1.0)))
        start += 1.0
    if not counts:
        return {"window_seconds": 1.0, "samples": 0, "mean": len(ends) / (ends[-1] - ends[0])}
    return {"window_seconds": 1.0, "samples": len(counts), **stats(counts)}


def _tokens(values: list[float]) -> dict[str, float]:
    return stats([float(int(v)) for v in values])


def request_metrics(lines: list[dict[str, Any]], theoretical: float | None,
                    num_gpus: int) -> dict[str, Any]:
    """`request_metrics` of the successful profiled requests' lines."""
    ttft = _seconds(_values(lines, "time_to_first_token"))
    e2el = _seconds(_values(lines, "request_latency"))
    itl = _seconds(_values(lines, "inter_token_latency"))
    itl_stats = stats(itl)
    per_token: list[float] = []
    for line in lines:
        latency = line["metrics"].get("request_latency")
        osl = line["metrics"].get("output_sequence_length")
        if latency and osl and latency["value"] > 0 and osl["value"] > 0:
            per_token.append(latency["value"] / 1000.0 / osl["value"])
    latency_block = {
        "ttft": stats(ttft), "e2el": stats(e2el), "itl": itl_stats, "tpot": stats(itl),
        "intvty": _inverse(itl_stats, itl), "e2e_norm_intvty": _inverse(stats(per_token),
                                                                        per_token),
        # kvbench times no HTTP completion apart from the last token: no full-response ITL
        "full_response_itl": {}, "full_response_intvty": {},
    }
    isl, osl = _values(lines, "input_sequence_length"), _values(lines, "output_sequence_length")
    starts = [x["metadata"]["request_start_ns"] for x in lines]
    ends = [x["metadata"]["request_end_ns"] for x in lines]
    throughput: dict[str, Any] = {}
    if starts and ends and (duration := (max(ends) - min(starts)) / 1e9) > 0:
        total_in, total_out = sum(int(v) for v in isl), sum(int(v) for v in osl)
        throughput = {"input": {"tokens_per_second": total_in / duration},
                      "output": {"tokens_per_second": total_out / duration},
                      "total": {"tokens_per_second": (total_in + total_out) / duration},
                      "duration_seconds": duration, "per_gpu": {}}
        if num_gpus > 0:
            throughput["per_gpu"] = {
                "total_tput_tps": (total_in + total_out) / duration / num_gpus,
                "output_tput_tps": total_out / duration / num_gpus,
                "input_tput_tps": total_in / duration / num_gpus}
    return {"qps": _qps(lines), "latency": latency_block,
            "tokens": {"input": _tokens(isl), "output_actual": _tokens(osl),
                       # looked up upstream in a local HF copy of the trace corpus; none here
                       "output_expected": {}},
            "throughput": throughput, "cache": {"theoretical_cache_hit_rate": theoretical}}


def accounting(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The successful profiled lines and `request_accounting` (request_metrics.py:26-79):
    every line counts, warm-up and errored lines are dropped, errors by their type."""
    kept, categories = [], {}
    warm = errored = 0
    for line in lines:
        warmup = line["metadata"].get("benchmark_phase") not in (None, "profiling")
        error = line.get("error")
        warm += warmup
        if error:
            errored += 1
            kind = str(error.get("type") or error.get("code") or "unknown")
            categories[kind] = categories.get(kind, 0) + 1
        if not (error or warmup):
            kept.append(line)
    return kept, {"records_total": len(lines), "records_profiled": len(kept),
                  "records_dropped_total": len(lines) - len(kept),
                  "records_warmup_dropped": warm, "records_error_dropped": errored,
                  "error_categories": categories}


def rounded(obj: Any) -> Any:
    """Finite floats to 5 decimals, integral ones >= 1 as integers."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return obj
        r = round(obj, 5)
        return int(r) if abs(r) >= 1 and r.is_integer() else r
    if isinstance(obj, dict):
        return {k: rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rounded(v) for v in obj]
    return obj


def server_block(metrics: dict[str, Any], framework: str, kept: list[dict[str, Any]],
                 log_text: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """`server_metrics` with the aggregator's fallbacks: the pool from the log, token
    totals from the requests when the engine counted none (server_metrics.py:32-71,
    backends/base.py:129-158). None: no backend reads these metrics."""
    warnings = []
    block = server_metrics(metrics, framework)
    if block is None:
        return None, []
    if not metrics:
        warnings.append("server_metrics_export.json missing or empty")
        block = empty_server_metrics(0)
    capacity = pool_tokens(log_text, backend_of(metrics, framework))
    if capacity is not None:
        block["kv_cache"]["gpu_total_tokens"] = capacity
    tokens = block["tokens"]
    isl, osl = _values(kept, "input_sequence_length"), _values(kept, "output_sequence_length")
    if tokens["prompt_total"] is None and isl:
        tokens["prompt_total"] = sum(int(v) for v in isl)
    if tokens["generation_total"] is None and osl:
        tokens["generation_total"] = sum(int(v) for v in osl)
    tokens["requests_completed"] = len(kept)
    return block, warnings


def build_agg(header: dict[str, Any], num_gpus: int, lines: list[dict[str, Any]],
              aggregate: dict[str, Any], metrics: dict[str, Any],
              log_text: str | None) -> dict[str, Any]:
    """The rounded aggregate JSON of one point. Raises ValueError when no InferenceX backend
    reads the engine's metrics (its aggregator refuses such a point the same way)."""
    kept, counts = accounting(lines)
    theo = aggregate.get("theoretical_prefix_cache_hit") or {}
    theoretical = theo["sum"] / theo["count"] if theo.get("count") else None
    server, warnings = server_block(metrics, header["framework"], kept, log_text)
    if server is None:
        raise ValueError(f"InferenceX's aggregator has no server-metrics backend for "
                         f"framework {header['framework']!r} with these metric names")
    agg = {**header, "num_requests_total": counts["records_total"],
           "num_requests_successful": len(kept), "request_accounting": counts}
    dataset = (aggregate.get("metadata") or {}).get("dataset")
    if isinstance(dataset, dict):
        agg["dataset"] = dataset
    agg["request_metrics"] = request_metrics(kept, theoretical, num_gpus)
    agg["server_metrics"] = server
    agg["kv_cache_pool_tokens"] = server["kv_cache"]["gpu_total_tokens"]
    if warnings:
        agg["warnings"] = warnings
    return rounded(agg)
