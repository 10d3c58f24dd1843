"""Request statistics from records: latency distributions, throughput, cache, client health.

Definitions (times from records, tokens from server usage):
- TTFT = first content chunk - send. E2E = last content chunk - send.
- TPOT (per request) = (last - first chunk) / (completion tokens - tokens of the first chunk);
  interactivity = 1000 / TPOT_ms tokens/s; E2E-normalised interactivity = completion tokens / E2E.
- ITL = per-token gaps: a chunk gap carrying k tokens gives k samples of gap / k.
- Throughput = token sums over the window from the first profiled send to the last profiled end.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kvbench.replay.checks import ideal_hit_rate, prompt_agreement, warm_cache_guard
from kvbench.replay.health import CPU_LIMIT, LAG_MS_LIMIT, LATENESS_MS_LIMIT

PCTS = (50, 75, 90, 95, 99)


def describe(values: Iterable[float]) -> dict:
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PCTS}, "std": None, "n": 0}
    qs = np.percentile(arr, PCTS)
    out = {"mean": float(arr.mean())}
    out.update({f"p{p}": float(q) for p, q in zip(PCTS, qs, strict=True)})
    out["std"] = float(arr.std())
    out["n"] = int(arr.size)
    return out


def _itl_samples(rec: dict, out: list[float]) -> None:
    ts = rec.get("chunk_ns") or []
    toks = rec.get("chunk_tokens") or [1] * len(ts)
    for i in range(1, len(ts)):
        k = max(1, toks[i]) if i < len(toks) else 1
        gap_ms = (ts[i] - ts[i - 1]) / 1e6
        out.extend([gap_ms / k] * k)


def summarize(records: Iterable[dict], *, num_gpus: int = 1, client: dict | None = None,
              time_scale: float = 1.0) -> dict:
    """The summary of one run; `client` is the runner's health report (loop lag, CPU).

    `time_scale` > 1 says the server's clock ran that much faster than wall time (the embedded
    engine's --time-scale): request timings and rates are converted to the server's time. The
    client's own health figures stay in wall time, where its saturation happens."""
    summary = _summarize_wall(records, num_gpus=num_gpus, client=client)
    return rescale_time(summary, time_scale) if time_scale != 1.0 else summary


# The client stamps token events on its own clock, which resolves about a millisecond of wall
# time (event-loop wake-ups). Against a server whose clock runs `time_scale` times faster that
# is `time_scale` ms of the server's time: gaps below it are tokens the server emitted in one
# wall tick, not inter-token latency (the quickstart's x50 engine gave ITL p50 = 0 ms).
CLIENT_RESOLUTION_MS = 1.0


def rescale_time(summary: dict, time_scale: float) -> dict:
    """Convert a wall-time summary to a server clock running `time_scale` times faster. ITL
    below what the client's clock resolves in that clock becomes unknown (None), with the
    reason; TPOT, a per-request span, stands."""
    out = dict(summary)
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        out[key] = _scaled(summary[key], time_scale)
    itl, floor_ms = out["itl_ms"], CLIENT_RESOLUTION_MS * time_scale
    if time_scale > 1 and itl.get("p50") is not None and itl["p50"] < floor_ms:
        out["itl_ms"] = {**{k: None for k in itl}, "n": itl.get("n", 0), "unresolved": (
            f"ITL p50 {itl['p50']:.2f} ms is below the {floor_ms:g} ms of server time the "
            f"client's clock resolves at x{time_scale:g}: tokens arrive in bursts; see TPOT")}
    for key in ("interactivity_tok_s", "e2e_norm_interactivity_tok_s"):
        out[key] = _scaled(summary[key], 1 / time_scale)
    out["throughput"] = _scaled(summary["throughput"], 1 / time_scale)
    out["qps"] = {**_scaled(summary["qps"], 1 / time_scale),
                  "window_s": summary["qps"]["window_s"] * time_scale}
    if summary.get("window_s") is not None:
        out["window_s"] = summary["window_s"] * time_scale
    out["time_scale"] = time_scale
    return out


def _scaled(stats: dict, factor: float) -> dict:
    # means, percentiles and std are floats and scale; the count `n` (an int) and None stay
    return {k: v * factor if isinstance(v, float) else v for k, v in stats.items()}


def _measured_ok(recs: list[dict]) -> list[dict]:
    return [r for r in recs if not r.get("is_warmup") and r.get("status") == "ok"
            and r.get("t_first_ns")]


def _cache(ok: list[dict]) -> dict:
    with_cache = [r for r in ok if r.get("cached_tokens") is not None]
    prompt_c = sum((r.get("prompt_tokens") or 0) for r in with_cache)
    cached = sum(r["cached_tokens"] for r in with_cache)
    return {
        "prompt_tokens": prompt_c if with_cache else None,
        "cached_tokens": cached if with_cache else None,
        "hit_rate": (cached / prompt_c) if with_cache and prompt_c else None,
        "ideal_hit_rate": ideal_hit_rate(ok),
    }


def cache_summary(records: Iterable[dict], *, absent_cached_tokens_are_zero: bool) -> dict:
    """The summary's `cache` block from the records again, reading a successful request that
    reported no cached tokens as 0 where the engine reports only hits (rescore of runs whose
    records were written before the replay knew it)."""
    ok = _measured_ok(list(records))
    if absent_cached_tokens_are_zero:
        ok = [r if r.get("cached_tokens") is not None else {**r, "cached_tokens": 0} for r in ok]
    return _cache(ok)


def _summarize_wall(records: Iterable[dict], *, num_gpus: int, client: dict | None) -> dict:
    recs = list(records)
    warm = [r for r in recs if r.get("is_warmup")]
    measured = [r for r in recs if not r.get("is_warmup")]
    ok = _measured_ok(recs)
    # requests cut off by the end of the run are neither results nor server errors
    cancelled = [r for r in measured if r.get("status") == "cancelled"]
    errors = [r for r in measured if r.get("status") not in ("ok", "cancelled")]
    by_kind: dict[str, int] = {}
    for r in errors:
        kind = r.get("error_kind") or "unknown"
        by_kind[kind] = by_kind.get(kind, 0) + 1

    ttft, e2e, tpot, inter, e2e_inter, itl = [], [], [], [], [], []
    for r in ok:
        ttft.append((r["t_first_ns"] - r["t_send_ns"]) / 1e6)
        e2e_ms = (r["t_last_ns"] - r["t_send_ns"]) / 1e6
        e2e.append(e2e_ms)
        n_out = r.get("completion_tokens") or len(r.get("chunk_ns") or ())
        first = (r.get("chunk_tokens") or [1])[0]
        if n_out - first > 0 and r["t_last_ns"] > r["t_first_ns"]:
            t = (r["t_last_ns"] - r["t_first_ns"]) / 1e6 / (n_out - first)
            tpot.append(t)
            inter.append(1000.0 / t)
        if n_out and e2e_ms > 0:
            e2e_inter.append(n_out * 1000.0 / e2e_ms)
        _itl_samples(r, itl)

    if ok:
        t0 = min(r["t_send_ns"] for r in ok)
        t1 = max(r["t_last_ns"] for r in ok)
        window_s = max((t1 - t0) / 1e9, 1e-9)
    else:
        t0, window_s = 0, 0.0
    n_in = sum((r.get("prompt_tokens") or r.get("sent_prompt_tokens") or 0) for r in ok)
    n_out = sum((r.get("completion_tokens") or 0) for r in ok)

    def rate(x: float) -> float | None:
        return x / window_s if window_s > 0 else None

    qps: list[int] = []
    if ok and window_s >= 1.0:
        buckets = np.zeros(int(window_s) + 1, dtype=int)
        for r in ok:
            buckets[min(int((r["t_last_ns"] - t0) / 1e9), len(buckets) - 1)] += 1
        qps = buckets[: max(1, int(window_s))].tolist()

    lateness = [(r["t_send_ns"] - r["t_target_ns"]) / 1e6 for r in measured
                if r.get("t_target_ns") and r.get("t_send_ns")]
    lag_ms = [x / 1e6 for x in (client or {}).get("loop_lag_ns", [])]
    lag_p99 = float(np.percentile(lag_ms, 99)) if lag_ms else None
    late_p99 = float(np.percentile(lateness, 99)) if lateness else None
    cpu = None
    if client and client.get("wall_s"):
        cpu = client["cpu_s"] / client["wall_s"]
    reasons = []
    if lag_p99 is not None and lag_p99 > LAG_MS_LIMIT:
        reasons.append(f"event-loop lag p99 {lag_p99:.1f} ms > {LAG_MS_LIMIT} ms")
    if late_p99 is not None and late_p99 > LATENESS_MS_LIMIT:
        reasons.append(f"send lateness p99 {late_p99:.1f} ms > {LATENESS_MS_LIMIT} ms")
    if cpu is not None and cpu > CPU_LIMIT:
        reasons.append(f"client CPU {cpu:.2f} cores > {CPU_LIMIT}")

    return {
        "requests": {
            "total": len(recs), "profiled": len(ok), "warmup": len(warm),
            "errors": len(errors), "errors_by_kind": by_kind, "cancelled": len(cancelled),
        },
        "ttft_ms": describe(ttft),
        "itl_ms": describe(itl),
        "tpot_ms": describe(tpot),
        "e2e_ms": describe(e2e),
        "interactivity_tok_s": describe(inter),
        "e2e_norm_interactivity_tok_s": describe(e2e_inter),
        "throughput": {
            "input_tok_s": rate(n_in), "output_tok_s": rate(n_out),
            "total_tok_s": rate(n_in + n_out),
            "output_tok_s_per_gpu": rate(n_out / num_gpus),
            "total_tok_s_per_gpu": rate((n_in + n_out) / num_gpus),
            "requests_s": rate(len(ok)),
        },
        "qps": {"window_s": 1.0, **describe(qps)},
        "window_s": window_s,
        "tokens": {"input": n_in, "output": n_out},
        "cache": _cache(ok),
        "prompt": prompt_agreement(ok),
        "warm_cache": warm_cache_guard(recs),
        "client": {
            "loop_lag_ms_p99": lag_p99, "send_lateness_ms_p99": late_p99,
            "cpu_cores": cpu, "saturated": bool(reasons), "reasons": reasons,
        },
    }
