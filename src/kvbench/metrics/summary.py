"""scrape.jsonl -> the one internal set of server metrics for a run, in reference names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.files import jsonl_path, read_jsonl
from kvbench.metrics.adapter import Adapter, Source, load_adapter
from kvbench.metrics.fields import FIELDS
from kvbench.metrics.inferencex import inferencex_reading
from kvbench.metrics.series import combine, counter_delta, gauge_stats, select_series
from kvbench.metrics.window import counted_snapshots
from kvbench.units import NS_PER_S

MAX_TIMELINE_POINTS = 600
TIMELINE_FIELDS = ("gpu_kv_usage", "host_pool_usage", "host_pool_used_tokens", "queue_depth",
                   "running_requests")


def _pick_source(sources: list[Source], snaps: list[dict]) -> Source | None:
    for source in sources:
        if any(source.metric in s["samples"] for s in snaps):
            return source
    return None


def _field_values(adapter: Adapter, name: str, snaps: list[dict]) -> dict[str, Any] | None:
    source = _pick_source(adapter.fields.get(name, []), snaps)
    if source is None:
        return None
    per_snap = [select_series(source, adapter, s["samples"]) for s in snaps]
    if FIELDS[name].kind == "counter":
        delta, resets = counter_delta(per_snap)
        return {"metric": source.metric, "delta": delta, "resets": resets}
    values = [None if p is None else combine(list(p.values()), source.across) for p in per_snap]
    return {"metric": source.metric, "values": values}


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _host_usage_series(fields: dict[str, dict | None], n: int) -> list[float | None]:
    used, total = fields.get("host_pool_used_tokens"), fields.get("host_pool_total_tokens")
    if used and total:
        return [_ratio(u, t) for u, t in zip(used["values"], total["values"], strict=True)]
    direct = fields.get("host_pool_usage")
    return direct["values"] if direct else [None] * n


def _signal(adapter_signals, fields: dict[str, dict | None], stats: dict) -> bool | None:
    if not adapter_signals:
        return None
    for sig in adapter_signals:
        f = fields.get(sig.field)
        if f is None:
            continue
        if sig.when == "present":
            return True
        value = f["delta"] if "delta" in f else (stats.get(sig.field) or {}).get("max", 0)
        if value and value > 0:
            return True
    return False


def _downsample(n: int) -> list[int]:
    if n <= MAX_TIMELINE_POINTS:
        return list(range(n))
    step = n / MAX_TIMELINE_POINTS
    idx = sorted({int(i * step) for i in range(MAX_TIMELINE_POINTS)} | {n - 1})
    return idx


# The embedded engine's clock at each scrape (sim/metrics.py): under a virtual clock the
# engine's time is no multiple of the wall time, so its timeline is drawn on the engine's own
ENGINE_CLOCK_METRIC = "kvbench:sim_clock_seconds"


def _engine_clock(snaps: list[dict]) -> list[float] | None:
    """Each scrape's engine-clock seconds, where every scrape carries them."""
    out = []
    for s in snaps:
        series = s["samples"].get(ENGINE_CLOCK_METRIC)
        if not series:
            return None
        out.append(float(series[0][1]))
    return out


def summarize_snapshots(snapshots: list[dict], engine: str,
                        from_unix_ns: int | None = None) -> dict[str, Any]:
    """Summarise scrape snapshots (as written by Scraper) for `engine`; with `from_unix_ns`
    (the profiling start after a warm-up: window.py) counted over the profiling phase."""
    adapter = load_adapter(engine)
    warnings: list[str] = []
    ok = [s for s in snapshots if s.get("ok")]
    failed = len(snapshots) - len(ok)
    base: dict[str, Any] = {"present": False, "adapter": engine, "snapshots": len(snapshots),
                            "failed_snapshots": failed, "warnings": warnings}
    if failed:
        errors = sorted({str(s.get("error")) for s in snapshots if not s.get("ok")})
        warnings.append(f"metrics endpoint failed {failed} of {len(snapshots)} scrapes: "
                        + "; ".join(errors[:3]))
    if not ok:
        warnings.append("no successful /metrics scrape: server metrics are absent")
        return base
    if not any(s.get("phase") == "pre" for s in ok):
        warnings.append("no pre-run scrape: counters are measured from the first good scrape")
    if not any(s.get("phase") == "post" for s in ok):
        warnings.append("no post-run scrape: counters end at the last good scrape")

    whole = ok
    ok = counted_snapshots(ok, from_unix_ns)
    windowed = from_unix_ns is not None
    fields = {name: _field_values(adapter, name, ok) for name in FIELDS}
    # gauges while requests ran: not the idle server before the run, nor the warm-up's
    # state in the baseline of a profiling window
    gauge_window = [i for i, s in enumerate(ok) if s.get("phase") != "pre"
                    and (i > 0 or not windowed)] or list(range(len(ok)))
    host_usage = _host_usage_series(fields, len(ok))
    stats: dict[str, dict | None] = {}
    for name, f in fields.items():
        if f is not None and FIELDS[name].kind == "gauge":
            stats[name] = gauge_stats([f["values"][i] for i in gauge_window])
    stats["host_pool_usage"] = gauge_stats([host_usage[i] for i in gauge_window])
    deltas = {n: f["delta"] for n, f in fields.items() if f is not None and "delta" in f}
    resets = sum(f.get("resets", 0) for f in fields.values() if f is not None)
    if resets:
        warnings.append(f"{resets} counter reset(s) during the window (server restart?)")
    absent = sorted(n for n, f in fields.items() if f is None and n in adapter.fields)

    prompt = deltas.get("prompt_tokens")
    tiers = {t: deltas.get(f"cached_tokens_{t}") for t in ("device", "host", "external")}
    cached_all = sum(v for v in tiers.values() if v is not None) if any(
        v is not None for v in tiers.values()) else None

    def stat(name: str, key: str, scale: float = 1.0) -> float | None:
        s = stats.get(name)
        return None if s is None else s[key] * scale

    t0 = ok[0]["t_ns"]
    idx = _downsample(len(ok))
    engine_clock = _engine_clock(ok)
    timeline: dict[str, list] = {
        "t_s": ([engine_clock[i] - engine_clock[0] for i in idx] if engine_clock else
                [(ok[i]["t_ns"] - t0) / NS_PER_S for i in idx]),
        "phase": [ok[i].get("phase") for i in idx]}
    if engine_clock:
        timeline["clock"] = "engine"
    for name in TIMELINE_FIELDS:
        series = host_usage if name == "host_pool_usage" else (
            fields[name]["values"] if fields.get(name) else None)
        timeline[name] = [series[i] for i in idx] if series else None
    return {
        **base,
        "present": True,
        "metric_count": len({n for s in ok for n in s["samples"]}),
        "window_s": (ok[-1]["t_ns"] - t0) / NS_PER_S,
        # what the counters count: the whole run, or its profiling phase after a warm-up
        # (the baseline scrape this many seconds before the phase began; the warm-up's
        # snapshots before it are left out)
        "counted_from": "profiling start" if windowed else "run start",
        "baseline_lead_s": (from_unix_ns - t0) / NS_PER_S if windowed else None,
        "warmup_snapshots_left_out": len(whole) - len(ok),
        "tokens": {"prompt_total": prompt, "generation_total": deltas.get("generation_tokens")},
        "cache": {
            "gpu_cache_hit_rate": _ratio(tiers["device"], prompt),
            "cpu_cache_hit_rate": _ratio(tiers["host"], prompt),
            "external_cache_hit_rate": _ratio(tiers["external"], prompt),
            "overall_cache_hit_rate": _ratio(cached_all, prompt),
            "cached_tokens_by_tier": tiers,
        },
        "kv_cache": {
            "gpu_usage_pct_max": stat("gpu_kv_usage", "max", 100.0),
            "gpu_usage_pct_mean": stat("gpu_kv_usage", "mean", 100.0),
            "gpu_total_tokens": stat("gpu_kv_capacity_tokens", "max"),
            "cpu_usage_pct_max": stat("host_pool_usage", "max", 100.0),
            "cpu_usage_pct_mean": stat("host_pool_usage", "mean", 100.0),
            "cpu_used_tokens_max": stat("host_pool_used_tokens", "max"),
            "cpu_total_tokens": stat("host_pool_total_tokens", "max"),
        },
        "kv_offload": {
            "bytes_gpu_to_cpu": deltas.get("offload_bytes_gpu_to_cpu"),
            "bytes_cpu_to_gpu": deltas.get("offload_bytes_cpu_to_gpu"),
            "tokens_gpu_to_cpu": deltas.get("offload_tokens_gpu_to_cpu"),
            "tokens_cpu_to_gpu": deltas.get("offload_tokens_cpu_to_gpu"),
        },
        "scheduler": {
            "queue_depth_max": stat("queue_depth", "max"),
            "queue_depth_mean": stat("queue_depth", "mean"),
            "running_requests_max": stat("running_requests", "max"),
            "running_requests_mean": stat("running_requests", "mean"),
            "preemptions": deltas.get("preemptions"),
            "prefix_cache_lookups": deltas.get("prefix_cache_lookups"),
            # > 1 means requests were looked up again while they waited (queueing)
            "prefix_cache_lookups_per_prompt_token": _ratio(
                deltas.get("prefix_cache_lookups"), prompt),
        },
        "engine_reported": {
            "page_size_tokens": stat("page_size_tokens", "last"),
            "offload_enabled": _signal(adapter.offload_signals, fields, stats),
            "spec_decoding": _signal(adapter.spec_signals, fields, stats),
        },
        "tiers": {
            "device": {"cached_tokens": tiers["device"],
                       "hit_rate": _ratio(tiers["device"], prompt),
                       "capacity_tokens": stat("gpu_kv_capacity_tokens", "max"),
                       "usage_pct_max": stat("gpu_kv_usage", "max", 100.0)},
            "host": {"cached_tokens": tiers["host"], "hit_rate": _ratio(tiers["host"], prompt),
                     "capacity_tokens": stat("host_pool_total_tokens", "max"),
                     "usage_pct_max": stat("host_pool_usage", "max", 100.0)},
            "external": {"cached_tokens": tiers["external"],
                         "hit_rate": _ratio(tiers["external"], prompt)},
        },
        "counters": deltas,
        "gauges": stats,
        "sources": {n: f["metric"] for n, f in fields.items() if f is not None},
        "absent_fields": absent,
        "counter_resets": resets,
        "timeline": timeline,
        # the same scrape as InferenceX's aggregator (or, for TRT-LLM, its app) reads it
        "inferencex": inferencex_reading(whole, engine, from_unix_ns),
    }


def summarize_scrape(path: Path, engine: str, from_unix_ns: int | None = None
                     ) -> dict[str, Any]:
    """Summarise `scrape.jsonl` at `path` (from `from_unix_ns` on: summarize_snapshots); a
    missing file yields `present: False` and a warning, never an exception."""
    found = jsonl_path(path)  # scrape.jsonl or scrape.jsonl.gz
    if found is None:
        load_adapter(engine)  # an unknown engine is still a configuration error
        return {"present": False, "adapter": engine, "snapshots": 0, "failed_snapshots": 0,
                "warnings": [f"no scrape file at {path}: server metrics are absent"]}
    return summarize_snapshots(read_jsonl(found), engine, from_unix_ns)
