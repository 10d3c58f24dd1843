"""Cache reuse as InferenceX computes and draws it, from the same counters kvbench reads.

Two steps, each what upstream does (and no more):
1. its aggregator's server-metric backends turn AIPerf's `server_metrics_export.json` into
   `server_metrics.cache` rates (InferenceX 843c6254f, utils/agentic/aggregation/backends/
   {sglang,vllm,dynamo_vllm,atom}.py, picked in the order of backends/__init__.py:13-28);
2. the dashboard's cache-reuse chart splits each point's prompt tokens into HBM, host and
   unreused shares (InferenceX-app 17ded8ef, packages/app/src/components/calculator/
   cache-reuse.ts `cacheShareOf`).

Where that differs from kvbench's per-prompt-token shares (results/reuse.py) it does so on
purpose upstream, and both are shown, each labelled: SGLang L3 storage hits are in neither the
GPU nor the CPU rate, so the chart counts them unreused (backends/sglang.py:42-49); a vLLM
without `prompt_tokens_by_source` divides prefix-cache hits by prefix-cache queries, which
the scheduler counts once per scheduling attempt (backends/vllm.py:22-32), not per prompt
token; TensorRT-LLM with offload draws one combined segment (cache-reuse.ts:21-23, 66-67).

TensorRT-LLM has no aggregator backend; its rates are what the app's ingest derives (see
`_trt_app_rates`). `metrics` is the `metrics` mapping of a server_metrics_export.json
(metrics/aiperf.py): family name -> {type, series: [{labels, stats}]}."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Metrics = dict[str, dict[str, Any]]
Where = Callable[[dict[str, Any]], bool] | None

# the stat a counter / gauge series is read by, first present wins (aggregation_common.py:
# 114-125; counters: total, sum, max, avg; gauges: max, avg, total)
_COUNTER = ("total", "sum", "max", "avg")
_GAUGE = ("max", "avg", "total")
_GAUGE_AVG = ("avg", "max", "total")


def _stat(series: dict[str, Any], prefs: tuple[str, ...]) -> float | None:
    stats = series.get("stats")
    if not isinstance(stats, dict):
        return None
    for key in prefs:
        value = stats.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _series(metrics: Metrics, names: str | Iterable[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in [names] if isinstance(names, str) else names:
        entry = metrics.get(name)
        if isinstance(entry, dict) and isinstance(entry.get("series"), list):
            out += [s for s in entry["series"] if isinstance(s, dict)]
    return out


def _total(metrics: Metrics, names: str | Iterable[str], where: Where = None,
           prefs: tuple[str, ...] = _COUNTER) -> float | None:
    """Sum of the series' stats; None when no series has one (aggregation_common.py:128)."""
    values = [v for s in _series(metrics, names)
              if (where is None or where(s)) and (v := _stat(s, prefs)) is not None]
    return sum(values) if values else None


def _gauge(metrics: Metrics, names: str | Iterable[str], combine: str = "max",
           where: Where = None) -> float | None:
    """Max (or mean) over series of each series' stat (aggregation_common.py:148-169)."""
    prefs = _GAUGE_AVG if combine == "avg" else _GAUGE
    values = [v for s in _series(metrics, names)
              if (where is None or where(s)) and (v := _stat(s, prefs)) is not None]
    if not values:
        return None
    return sum(values) / len(values) if combine == "avg" else max(values)


def _label(series: dict[str, Any], key: str) -> str | None:
    labels = series.get("labels")
    value = labels.get(key) if isinstance(labels, dict) else None
    return None if value is None else str(value)


def _by_label(metrics: Metrics, name: str, key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in _series(metrics, name):
        label, value = _label(s, key), _stat(s, _COUNTER)
        if label is not None and value is not None:
            out[label] = out.get(label, 0.0) + value
    return out


def _rate(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else float(num) / float(den)


def _fraction(value: float | None) -> float | None:
    """Gauges exported as 0..100 are read as fractions (aggregation_common.py:62-68)."""
    return value / 100.0 if value is not None and value > 1.5 else value


def _count(value: float | None) -> int | None:
    return None if value is None else round(value)


def empty_server_metrics(metric_count: int) -> dict[str, Any]:
    """The nested `server_metrics` block before a backend fills it (backends/base.py:78-126)."""
    return {
        "present": metric_count > 0, "adapter": "none", "metric_count": metric_count,
        "cache": dict.fromkeys((
            "gpu_cache_hit_rate", "cpu_cache_hit_rate", "external_cache_hit_rate",
            "overall_cache_hit_rate", "prefix_cache_hits", "prefix_cache_queries",
            "external_prefix_cache_hits", "external_prefix_cache_queries")) | {
            "cached_tokens_by_source": {}} | dict.fromkeys((
                "frontend_cache_hit_rate", "router_kv_hit_rate", "router_shared_cache_hit_rate",
                "frontend_cached_tokens", "frontend_input_tokens")),
        "kv_cache": dict.fromkeys(("gpu_usage_pct", "gpu_total_tokens", "cpu_usage_pct",
                                   "cpu_used_tokens", "cpu_total_tokens")),
        "kv_offload": dict.fromkeys((
            "bytes_gpu_to_cpu", "bytes_cpu_to_gpu", "time_gpu_to_cpu", "time_cpu_to_gpu",
            "bandwidth_gpu_to_cpu_bytes_per_second", "bandwidth_cpu_to_gpu_bytes_per_second")),
        "tokens": {"prompt_total": None, "generation_total": None, "requests_completed": None,
                   "prompt_by_source": {"gpu_cache_hit": None, "cpu_or_external_cache_hit": None,
                                        "computed": None, "raw": {}}},
        "sources": [],
    }


def _sglang(m: Metrics, out: dict[str, Any]) -> None:
    """backends/sglang.py:19-126: device and host hits over prompt tokens; storage (L3) hits
    only in the overall rate."""
    prompt, generation = _total(m, "sglang:prompt_tokens"), _total(m, "sglang:generation_tokens")
    by_source = _by_label(m, "sglang:cached_tokens", "cache_source")
    device, host = by_source.get("device"), by_source.get("host")
    overall = _rate(sum(by_source.values()) if by_source else None, prompt)
    if overall is None:
        overall = _fraction(_gauge(m, "sglang:cache_hit_rate", "avg"))
    host_used = _gauge(m, "sglang:hicache_host_used_tokens")
    host_total = _gauge(m, "sglang:hicache_host_total_tokens")
    cpu = _rate(host, prompt)
    out["cache"].update(gpu_cache_hit_rate=_rate(device, prompt), cpu_cache_hit_rate=cpu,
                        external_cache_hit_rate=cpu, overall_cache_hit_rate=overall,
                        cached_tokens_by_source=by_source)
    out["kv_cache"].update(
        gpu_usage_pct=_fraction(_gauge(m, "sglang:token_usage")),
        gpu_total_tokens=_count(_total(m, "sglang:max_total_num_tokens",
                                       prefs=("max", "avg", "total", "sum"))),
        cpu_usage_pct=_rate(host_used, host_total), cpu_used_tokens=host_used,
        cpu_total_tokens=host_total)
    computed = _total(m, "sglang:realtime_tokens",
                      where=lambda s: _label(s, "mode") == "prefill_compute")
    out["tokens"].update(prompt_total=_count(prompt), generation_total=_count(generation),
                         prompt_by_source={"gpu_cache_hit": device,
                                           "cpu_or_external_cache_hit": host,
                                           "computed": computed, "raw": by_source})


def _vllm_source_id(series: dict[str, Any]) -> str:
    """Role (from the dynamo_component / component label), endpoint and rank labels
    (backends/vllm.py:295-315)."""
    labels = series.get("labels") if isinstance(series.get("labels"), dict) else {}
    component = str(labels.get("dynamo_component") or labels.get("component") or "")
    role = {"prefill": "prefill", "backend": "decode", "decode": "decode",
            "frontend": "router", "router": "router"}.get(component, "combined")
    parts = [role] + ([str(series["endpoint_url"])] if series.get("endpoint_url") else [])
    parts += [f"{k}={v}" for k in ("worker_id", "dp_rank", "engine")
              if (v := _label(series, k)) is not None]
    return "|".join(parts)


def _vllm_sources(m: Metrics) -> list[dict[str, Any]]:
    """Per-source token and hit figures (backends/vllm.py:252-292)."""
    ids = {_vllm_source_id(s) for name in (
        "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_hits",
        "vllm:prefix_cache_queries", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_by_source")
        for s in _series(m, name)}
    out = []
    for sid in sorted(i for i in ids if i):
        def mine(s: dict[str, Any], sid: str = sid) -> bool:
            return _vllm_source_id(s) == sid
        out.append({
            "id": sid, "role": sid.split("|", 1)[0],
            "prompt_tokens": _total(m, "vllm:prompt_tokens", mine),
            "generation_tokens": _total(m, "vllm:generation_tokens", mine),
            "prefix_cache_hit_rate": _rate(_total(m, "vllm:prefix_cache_hits", mine),
                                           _total(m, "vllm:prefix_cache_queries", mine)),
            "gpu_kv_cache_usage_pct": _fraction(_gauge(
                m, ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"], where=mine)),
        })
    return out


def _first_total(m: Metrics, names: list[str]) -> float | None:
    for name in names:
        if (value := _total(m, name)) is not None:
            return value
    return None


def _vllm(m: Metrics, out: dict[str, Any], dynamo: bool = False) -> None:
    """backends/vllm.py:33-173: GPU rate = prefix-cache hits / queries and the external
    rate likewise, both replaced by shares of `prompt_tokens_by_source` when the engine
    exports it; Dynamo takes its token totals from the frontend first (dynamo_vllm.py:20-32)."""
    if dynamo:
        prompt = _first_total(m, ["dynamo_frontend_input_sequence_tokens", "vllm:prompt_tokens"])
        generation = _first_total(m, ["dynamo_frontend_output_tokens", "vllm:generation_tokens"])
    else:
        prompt, generation = _total(m, "vllm:prompt_tokens"), _total(m, "vllm:generation_tokens")
    hits, queries = _total(m, "vllm:prefix_cache_hits"), _total(m, "vllm:prefix_cache_queries")
    ext_hits = _total(m, "vllm:external_prefix_cache_hits")
    ext_queries = _total(m, "vllm:external_prefix_cache_queries")
    gpu = _rate(hits, queries)
    cpu = external = _rate(ext_hits, ext_queries)
    overall = None
    by_source = _by_label(m, "vllm:prompt_tokens_by_source", "source")
    if by_source:
        local, transfer = by_source.get("local_cache_hit"), by_source.get("external_kv_transfer")
        whole = sum(by_source.values())
        if whole > 0:
            if local is not None:
                gpu = local / whole
            if transfer is not None:
                cpu = external = transfer / whole
            overall = ((local or 0.0) + (transfer or 0.0)) / whole
        out["tokens"]["prompt_by_source"] = {
            "gpu_cache_hit": local, "cpu_or_external_cache_hit": transfer,
            "computed": by_source.get("local_compute"), "raw": by_source}
    elif gpu is not None:
        overall = gpu
    offload = {f"{kind}_{d}": _total(m, f"vllm:kv_offload_{kind}_{d}")
               for kind in ("bytes", "time") for d in ("gpu_to_cpu", "cpu_to_gpu")}
    out["cache"].update(gpu_cache_hit_rate=gpu, cpu_cache_hit_rate=cpu,
                        external_cache_hit_rate=external, overall_cache_hit_rate=overall,
                        prefix_cache_hits=hits, prefix_cache_queries=queries,
                        external_prefix_cache_hits=ext_hits,
                        external_prefix_cache_queries=ext_queries)
    out["kv_cache"].update(
        gpu_usage_pct=_fraction(_gauge(m, ["vllm:kv_cache_usage_perc",
                                           "vllm:gpu_cache_usage_perc"])),
        cpu_usage_pct=_fraction(_gauge(m, "vllm:cpu_kv_cache_usage_perc")))
    out["kv_offload"].update(
        offload, **{f"bandwidth_{d}_bytes_per_second": _rate(offload[f"bytes_{d}"],
                                                             offload[f"time_{d}"])
                    for d in ("gpu_to_cpu", "cpu_to_gpu")})
    out["tokens"].update(prompt_total=_count(prompt), generation_total=_count(generation))
    out["sources"] = _vllm_sources(m)
    if dynamo:
        _dynamo(m, out)


def _dynamo(m: Metrics, out: dict[str, Any]) -> None:
    """dynamo_vllm.py:34-89: the frontend's cached share and the router's hit-rate gauges."""
    if out["kv_cache"]["gpu_usage_pct"] is None:
        out["kv_cache"]["gpu_usage_pct"] = _fraction(
            _gauge(m, "dynamo_component_gpu_cache_usage_percent"))
    cached = _total(m, "dynamo_frontend_cached_tokens")
    seen = _total(m, "dynamo_frontend_input_sequence_tokens")
    frontend = _rate(cached, seen)
    router_kv = _fraction(_gauge(m, "dynamo_component_router_kv_hit_rate", "avg"))
    shared = _fraction(_gauge(m, "dynamo_component_router_shared_cache_hit_rate", "avg"))
    # its fallback of the overall rate to these (dynamo_vllm.py:71-72) sets only the flat
    # field the aggregator prints; the nested block written keeps the vLLM rate
    out["cache"].update(frontend_cache_hit_rate=frontend, router_kv_hit_rate=router_kv,
                        router_shared_cache_hit_rate=shared, frontend_cached_tokens=cached,
                        frontend_input_tokens=seen)


def _atom_names(stem: str, counter: bool = True) -> list[str]:
    """ATOM's own `atom:` names and Atomesh's `atom_` form, as family and `_total` names
    (backends/atom.py:11-18)."""
    names = [f"atom:{stem}", f"atom_{stem}"]
    return names + [f"{n}_total" for n in names] if counter else names


def _atom(m: Metrics, out: dict[str, Any]) -> None:
    """backends/atom.py:25-81: cached and LMCache-loaded tokens, each over the tokens the
    prefix cache considered; overall = the cached rate (not their sum)."""
    prompt = _total(m, _atom_names("prompt_tokens"))
    generation = _total(m, _atom_names("generation_tokens"))
    cached = _total(m, _atom_names("prefix_cache_cached_tokens"))
    full = _total(m, _atom_names("prefix_cache_full_tokens"))
    loaded = _total(m, _atom_names("lmcache_loaded_tokens"))
    hit, external = _rate(cached, full), _rate(loaded, full)
    out["cache"].update(gpu_cache_hit_rate=hit, cpu_cache_hit_rate=external,
                        external_cache_hit_rate=external, overall_cache_hit_rate=hit,
                        prefix_cache_hits=cached, prefix_cache_queries=full,
                        external_prefix_cache_hits=loaded, external_prefix_cache_queries=full)
    out["kv_cache"]["gpu_usage_pct"] = _fraction(
        _gauge(m, _atom_names("kv_cache_usage_ratio", counter=False)))
    out["tokens"].update(prompt_total=_count(prompt), generation_total=_count(generation))


def _prefixed(m: Metrics, *prefixes: str) -> bool:
    return any(name.startswith(prefixes) for name in m)


# (name, matches(metrics, framework lowercased), populate): backends/__init__.py:13-18 order
_BACKENDS: tuple[tuple[str, Callable[[Metrics, str], bool], Callable[..., None]], ...] = (
    ("dynamo-vllm", lambda m, f: f.startswith("dynamo") or _prefixed(m, "dynamo_"),
     lambda m, out: _vllm(m, out, dynamo=True)),
    ("atom", lambda m, f: _prefixed(m, "atom:", "atom_") or (not m and f == "atom"), _atom),
    ("sglang", lambda m, f: _prefixed(m, "sglang:") or (not m and f == "sglang"), _sglang),
    ("vllm", lambda m, f: _prefixed(m, "vllm:") or (not m and f == "vllm"), _vllm),
)


def backend_of(metrics: Metrics, framework: str) -> str | None:
    """The aggregator backend InferenceX picks for these metrics and framework, or None (its
    aggregator then refuses the point: server_metrics.py:51-56)."""
    for name, matches, _ in _BACKENDS:
        if matches(metrics, framework.lower()):
            return name
    return None


def server_metrics(metrics: Metrics, framework: str) -> dict[str, Any] | None:
    """The nested `server_metrics` block InferenceX's aggregator writes for these metrics,
    before its token and capacity fallbacks (server_metrics.py:32-56); None when no backend
    reads them."""
    out = empty_server_metrics(len(metrics))
    name = backend_of(metrics, framework)
    if not metrics:
        return out
    if name is None:
        return None
    out["adapter"] = name
    next(p for n, _, p in _BACKENDS if n == name)(metrics, out)
    return out


def _family(framework: str | None) -> str | None:
    """InferenceX-app lib/framework-family.ts: the engine family a framework string names."""
    low = (framework or "").lower()
    return next((f for f in ("vllm", "sglang", "trt", "atom") if f in low), None)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))


def cache_share(cache: dict[str, Any] | None, framework: str | None,
                kv_offloading: str | None,
                theoretical: float | None = None) -> dict[str, Any] | None:
    """`cacheShareOf` (cache-reuse.ts:56-93) of one point: {hbm, host, unreused, combined,
    host_source, theoretical, reported_total}; None when the point reports no tier at all
    (the chart lists it as unmeasured). `cache` holds the aggregate's gpu / cpu / external
    cache hit rates."""
    cache = cache or {}
    gpu, external, cpu = (cache.get(k) for k in ("gpu_cache_hit_rate", "external_cache_hit_rate",
                                                  "cpu_cache_hit_rate"))
    if not any(_finite(v) for v in (gpu, external, cpu)):
        return None
    # lib/kv-offload.ts isKvOffloadEnabled: any tier but `none` is offload
    offload_on = bool((kv_offloading or "").strip()) and \
        (kv_offloading or "").strip().lower() != "none"
    combined = offload_on and _family(framework) == "trt"
    source = None if combined else "cpu" if _finite(cpu) else \
        "external" if _finite(external) else None
    host_raw = cpu if source == "cpu" else external if source == "external" else 0.0
    hbm = max(0.0, min(1.0, gpu if _finite(gpu) else 0.0))
    host = max(0.0, min(1.0 - hbm, host_raw))
    return {"hbm": hbm, "host": host, "unreused": max(0.0, 1.0 - hbm - host),
            "combined": combined, "host_source": source,
            "theoretical": max(0.0, min(1.0, theoretical)) if _finite(theoretical) else None,
            "reported_total": (gpu if _finite(gpu) else 0.0) + host_raw}


RATES = ("gpu_cache_hit_rate", "cpu_cache_hit_rate", "external_cache_hit_rate",
         "overall_cache_hit_rate")


def _trt_app_rates(m: Metrics) -> dict[str, float | None]:
    """InferenceX's aggregator has no TensorRT-LLM backend (a `trtllm_` scrape makes it refuse
    the point); the app's ingest derives the TRT row's rates itself: GPU = the
    `trtllm_kv_cache_hit_rate` gauge's mean, else cached / prompt tokens; no host or external
    rate (InferenceX-app d03bd01e, packages/db/src/etl/agentx-server-metrics/trtllm.ts:4-15).
    Counter families here lack the `_total` its CSV names carry."""
    prompt = _total(m, ["trtllm_prompt_tokens", "trtllm_prompt_tokens_total"])
    gpu = _fraction(_gauge(m, "trtllm_kv_cache_hit_rate", "avg"))
    if gpu is None:
        gpu = _rate(_total(m, ["trtllm_prompt_cached_tokens",
                               "trtllm_prompt_cached_tokens_total"]), prompt)
    return {"gpu_cache_hit_rate": gpu, "cpu_cache_hit_rate": None,
            "external_cache_hit_rate": None, "overall_cache_hit_rate": gpu}


def inferencex_reading(snapshots: list[dict[str, Any]], framework: str,
                       from_unix_ns: int | None = None) -> dict[str, Any]:
    """{backend, source, cache: the four rates} InferenceX derives from this scrape (over the
    profiling phase from `from_unix_ns`, as the export: metrics/window.py)."""
    from kvbench.metrics.aiperf import server_metrics_export

    metrics = server_metrics_export(snapshots, from_unix_ns=from_unix_ns)["metrics"]
    if _family(framework) == "trt" or _prefixed(metrics, "trtllm_"):
        return {"backend": "trt", "source": "InferenceX-app ingest, trtllm parser",
                "cache": _trt_app_rates(metrics)}
    block = server_metrics(metrics, framework)
    if block is not None and metrics:
        name = block["adapter"]
        return {"backend": name, "source": f"InferenceX aggregator, {name} backend",
                "cache": {k: block["cache"][k] for k in RATES}}
    return {"backend": None, "source": "no InferenceX backend reads these metrics",
            "cache": None}
