"""Arm comparison: pair results that differ only in the compared dimension, and say whether
each delta exceeds run-to-run noise (estimated from repeats, where there are any)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from kvbench.errors import ResultError
from kvbench.results.schema import Result

# Fields that identify a configuration point; two results pair when all but the compared
# ones agree.
IDENTITY = ("model", "hw", "framework", "precision", "scenario_type", "is_multinode", "tp",
            "ep", "dp_attention", "pp", "dcp_size", "pcp_size", "spec_decoding",
            "kv_offloading", "backend", "conc")
# A result's offload backend follows its offload flag: comparing one compares both.
COUPLED = {"kv_offloading": {"backend"}, "backend": {"kv_offloading"}}
NOISE_SIGMAS = 2.0


@dataclass(frozen=True, slots=True)
class Metric:
    label: str
    path: tuple[str, ...]
    higher_is_better: bool


METRICS = (
    Metric("output tok/s/GPU", ("request_metrics", "throughput", "output_tok_s_per_gpu"), True),
    Metric("interactivity p50 tok/s", ("request_metrics", "latency", "interactivity_tok_s",
                                       "p50"), True),
    Metric("TTFT p50 ms", ("request_metrics", "latency", "ttft_ms", "p50"), False),
    Metric("TTFT p90 ms", ("request_metrics", "latency", "ttft_ms", "p90"), False),
    Metric("E2E p50 ms", ("request_metrics", "latency", "e2e_ms", "p50"), False),
    Metric("cache hit rate (all tiers)", ("server_metrics", "cache", "overall_cache_hit_rate"),
           True),
    Metric("cache hit rate (host)", ("server_metrics", "cache", "cpu_cache_hit_rate"), True),
    Metric("J per output token", ("energy", "j_per_output_token"), False),
)


def field_value(r: Result, name: str) -> str:
    name = name.replace("-", "_")
    if name == "backend":
        return str((r.kv_offload_backend or {}).get("name", "none"))
    if name not in Result.model_fields:
        allowed = ", ".join(sorted((*IDENTITY, "exp_name", "config_key", "runner")))
        raise ResultError(f"cannot compare by {name!r}", hint=f"use one of: {allowed}")
    v = getattr(r, name)
    return str(v).lower() if isinstance(v, bool) else str(v)


def parse_selection(text: str) -> dict[str, str]:
    """'kv_offloading=dram,tp=4' -> {'kv_offloading': 'dram', 'tp': '4'}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ResultError(f"bad selection {part!r}", hint="write KEY=VALUE[,KEY=VALUE]")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def _dig(d: Any, path: tuple[str, ...]) -> float | None:
    for k in path:
        d = d.get(k) if isinstance(d, dict) else getattr(d, k, None)
    return float(d) if isinstance(d, int | float) else None


def _sort_key(v: str) -> tuple:
    order = {"none": 0, "false": 0, "true": 1}
    return (0, float(v), "") if v.replace(".", "", 1).isdigit() else (1, order.get(v, 2), v)


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None, "n": len(values)}


def _delta(base: dict, other: dict, higher_is_better: bool) -> dict[str, Any]:
    if base["mean"] is None or other["mean"] is None:
        return {"abs": None, "pct": None, "noise": None, "verdict": "n/a"}
    d = other["mean"] - base["mean"]
    pct = d / base["mean"] * 100 if base["mean"] else None
    with_repeats = [s for s in (base, other) if s["std"] is not None]
    if not with_repeats:
        noise, verdict = None, "no repeats"
    else:
        pooled = sum(s["std"] ** 2 * (s["n"] - 1) for s in with_repeats) / sum(
            s["n"] - 1 for s in with_repeats)
        noise = NOISE_SIGMAS * math.sqrt(pooled * (1 / base["n"] + 1 / other["n"]))
        if abs(d) <= noise:
            verdict = "within noise"
        else:
            verdict = "better" if (d > 0) == higher_is_better else "worse"
    return {"abs": d, "pct": pct, "noise": noise, "verdict": verdict}


def compare(results: list[Result], *, by: str | None = "kv_offloading",
            a: dict[str, str] | None = None, b: dict[str, str] | None = None) -> dict[str, Any]:
    """Group successful results into arms (values of `by`, or the selections `a` and `b`),
    pair them on every other identity field, and compute per-metric deltas against the
    first arm."""
    ok = [r for r in results if r.status == "ok"]
    if (a is None) != (b is None):
        raise ResultError("give both --a and --b, or neither")
    if a is not None:
        compared = set(a) | set(b)
        for k in compared:  # an unknown key fails here, naming the allowed ones
            if ok:
                field_value(ok[0], k)
        arm_names = [_label(a), _label(b)]

        def arm_of(r: Result) -> str | None:
            in_a = all(field_value(r, k) == v for k, v in a.items())
            in_b = all(field_value(r, k) == v for k, v in b.items())
            if in_a and in_b:
                raise ResultError(f"{r.exp_name} matches both selections",
                                  hint="make --a and --b disjoint")
            return arm_names[0] if in_a else arm_names[1] if in_b else None
    else:
        by = (by or "kv_offloading").replace("-", "_")
        compared = {by}
        values = sorted({field_value(r, by) for r in ok}, key=_sort_key)
        arm_names = [f"{by}={v}" for v in values]

        def arm_of(r: Result) -> str | None:
            return f"{by}={field_value(r, by)}"

    for k in list(compared):
        compared |= COUPLED.get(k, set())
    key_fields = [f for f in IDENTITY if f not in compared]
    cells: dict[tuple, dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in ok:
        arm = arm_of(r)
        if arm is not None:
            cells[tuple(field_value(r, f) for f in key_fields)][arm].append(r)
    out_cells, unpaired = [], 0
    for key, arms in sorted(cells.items(), key=lambda kv: [_sort_key(v) for v in kv[0]]):
        present = [n for n in arm_names if n in arms]
        if len(present) < 2:
            unpaired += 1
            continue
        rows = []
        for m in METRICS:
            stats = {n: _stats([v for r in arms[n] if (v := _dig(r, m.path)) is not None])
                     for n in present}
            if all(s["mean"] is None for s in stats.values()):
                continue
            base = stats[present[0]]
            rows.append({"metric": m.label, "higher_is_better": m.higher_is_better,
                         "arms": stats,
                         "deltas": {n: _delta(base, stats[n], m.higher_is_better)
                                    for n in present[1:]}})
        out_cells.append({"key": dict(zip(key_fields, key, strict=True)), "arms": present,
                          "runs": {n: [r.exp_name for r in arms[n]] for n in present},
                          "metrics": rows})
    return {"compared": sorted(compared), "arms": arm_names, "cells": out_cells,
            "unpaired_cells": unpaired, "noise_sigmas": NOISE_SIGMAS}


def _label(sel: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sel.items())
