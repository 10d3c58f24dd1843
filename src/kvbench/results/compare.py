"""Arm comparison: pair results that differ only in the compared dimension, and say whether
each delta exceeds run-to-run noise (estimated from repeats, where there are any).

The noise of a delta is the 95% interval of the difference of the arms' means (Student t on
the pooled repeat variance): `better`/`worse` when the interval excludes zero (significant),
`within noise` when it does not. An interval needs two runs in each arm: with fewer in either
the delta is `too few runs`, its number and no verdict (one arm's spread said nothing about
the other's: `+87.8 % ±0.0 better` from n=2 vs n=1, issue 39). A metric some runs of an arm
lack (ITL a wall clock's client could not resolve) is `partial`: its arms are not over the
same runs, so no verdict either. An offload arm whose host tier was never hit and whose hit
rates equal the resident arm's did not exercise offload: its deltas are `offload not
exercised`, never significant, whatever the interval says. Any other delta where either arm
has a run that is not valid (results/validity.py) is `not valid`: its numbers, no verdict.

Units: hit rates are shares of the prompt tokens and their deltas are percentage points
(`pp`); every other delta is relative to the first arm (`%`), or in the metric's own unit
where the first arm's mean is zero."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench.errors import ResultError
from kvbench.results.option_sets import option_labels
from kvbench.results.reuse import cache_reuse, offload_share
from kvbench.results.schema import Result

# Fields that identify a configuration point; two results pair when all but the compared
# ones agree.
IDENTITY = ("model", "hw", "framework", "precision", "scenario_type", "is_multinode", "tp",
            "ep", "dp_attention", "pp", "dcp_size", "pcp_size", "spec_decoding",
            "kv_offloading", "backend", "conc")
# A result's offload backend follows its offload flag: comparing one compares both.
COUPLED = {"kv_offloading": {"backend"}, "backend": {"kv_offloading"}}
# what makes two runs of one configuration the same experiment: the run options and the
# sessions the replay sent (Result.sessions)
EXPERIMENT = ("options_id", "sessions")
CONFIDENCE = 0.95
# Student t, two-sided 95%, by degrees of freedom (beyond 30: the normal 1.96)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# hit rates closer than this are "equal" for the offload-exercised test
EQUAL_HIT_RATE = 0.005
IDLE = "offload not exercised"
FEW = "too few runs"  # an arm with fewer than two runs: no interval
PARTIAL = "partial"  # some runs of an arm lack the metric: the arms are not over the same runs
MIN_RUNS = 2
# A delta with an arm whose runs are not all valid (client saturated, offload tier never hit,
# failed requests...) says nothing about the arms: its numbers are shown, never a verdict.
NOT_VALID = "not valid"


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True, slots=True)
class Metric:
    label: str
    path: tuple[str, ...]
    higher_is_better: bool
    # read when `path` is absent: SGLang creates its per-tier cache counters at their first
    # hit (prometheus_client label children), so a run that never hit has none, while its
    # per-request usage (cache_reuse) still says 0 cached
    fallback: tuple[str, ...] | None = None
    # a value derived from several fields, read instead of `path`
    derive: Callable[[Result], float | None] | None = None
    unit: str = ""
    # a share of the prompt tokens (a hit rate): shown in %, its delta in percentage points
    share: bool = False

    def value(self, r: Result) -> float | None:
        if self.derive is not None:
            return self.derive(r)
        v = _dig(r, self.path)
        return _dig(r, self.fallback) if v is None and self.fallback else v


METRICS = (
    Metric("output tok/s/GPU", ("request_metrics", "throughput", "output_tok_s_per_gpu"), True,
           unit="tok/s"),
    Metric("interactivity p50 tok/s", ("request_metrics", "latency", "interactivity_tok_s",
                                       "p50"), True, unit="tok/s"),
    Metric("TTFT p50 ms", ("request_metrics", "latency", "ttft_ms", "p50"), False, unit="ms"),
    Metric("TTFT p90 ms", ("request_metrics", "latency", "ttft_ms", "p90"), False, unit="ms"),
    Metric("ITL p50 ms", ("request_metrics", "latency", "itl_ms", "p50"), False, unit="ms"),
    Metric("E2E p50 ms", ("request_metrics", "latency", "e2e_ms", "p50"), False, unit="ms"),
    Metric("cache hit rate (all tiers)", ("server_metrics", "cache", "overall_cache_hit_rate"),
           True, ("cache_reuse", "per_request_hit_rate"), share=True),
    # host and external tiers together, as the "prompt tokens from" line counts them
    Metric("cache hit rate (offload tier)", (), True,
           derive=lambda r: offload_share(result_reuse(r)), share=True),
    Metric("J per output token", ("energy", "j_per_output_token"), False, unit="J"),
)


def field_value(r: Result, name: str) -> str:
    name = name.replace("-", "_")
    if name == "backend":
        return str((r.kv_offload_backend or {}).get("name", "none"))
    if name == "sessions":
        return r.sessions
    if name not in Result.model_fields:
        allowed = ", ".join(sorted((*IDENTITY, "exp_name", "config_key", "runner",
                                    *EXPERIMENT)))
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


def _delta(base: dict, other: dict, higher_is_better: bool,
           share: bool = False) -> dict[str, Any]:
    """Delta of the means with its 95% half-interval `noise` (same unit) and `noise_pct`;
    `share`: a hit rate, whose delta is absolute (percentage points), never relative."""
    if base["mean"] is None or other["mean"] is None:
        return {"abs": None, "pct": None, "noise": None, "noise_pct": None,
                "significant": None, "verdict": "n/a"}
    d = other["mean"] - base["mean"]
    relative = base["mean"] and not share
    pct = d / base["mean"] * 100 if relative else None
    significant = None
    if min(base["n"], other["n"]) < MIN_RUNS:
        noise, verdict = None, FEW
    else:
        df = base["n"] + other["n"] - 2
        pooled = ((base["std"] ** 2) * (base["n"] - 1)
                  + (other["std"] ** 2) * (other["n"] - 1)) / df
        noise = t95(df) * math.sqrt(pooled * (1 / base["n"] + 1 / other["n"]))
        significant = abs(d) > noise
        verdict = ("better" if (d > 0) == higher_is_better else "worse") if significant \
            else "within noise"
    noise_pct = noise / abs(base["mean"]) * 100 if noise is not None and relative else None
    return {"abs": d, "pct": pct, "noise": noise, "noise_pct": noise_pct,
            "significant": significant, "verdict": verdict}


def _offload_idle(arms: dict[str, list[Result]], present: list[str]) -> set[str]:
    """Arms (after the first) that offload but never hit an offload tier, with the same hit
    rate as the baseline: any difference they show is not an offload effect."""
    def offload_tokens(r: Result) -> float:
        tiers = (r.server_metrics.get("cache") or {}).get("cached_tokens_by_tier") or {}
        return sum(v or 0 for t, v in tiers.items() if t != "device")

    def hit(rs: list[Result]) -> float | None:
        vals = [v for r in rs if (v := _dig(r, ("server_metrics", "cache",
                                                 "overall_cache_hit_rate"))) is not None]
        return statistics.fmean(vals) if vals else None

    base_hit = hit(arms[present[0]])
    idle = set()
    for n in present[1:]:
        rs = arms[n]
        if not all(r.server_metrics.get("present") for r in rs):
            continue
        if {r.kv_offloading for r in rs} == {r.kv_offloading for r in arms[present[0]]}:
            continue
        other_hit = hit(rs)
        if (all(r.kv_offloading != "none" and offload_tokens(r) == 0 for r in rs)
                and base_hit is not None and other_hit is not None
                and abs(other_hit - base_hit) <= EQUAL_HIT_RATE):
            idle.add(n)
    return idle


def result_reuse(r: Result) -> dict[str, Any] | None:
    """The run's cache-reuse shares (results/reuse.py); derived again for a result written
    before they were stored."""
    if r.cache_reuse is not None:
        return r.cache_reuse
    return cache_reuse(r.server_metrics, {"cache": (r.request_metrics or {}).get("cache")})


def _arm_reuse(rs: list[Result]) -> dict[str, Any] | None:
    """The arm's mean share of prompt tokens per source over its repeats."""
    views = [v for r in rs if (v := result_reuse(r)) is not None]
    if not views:
        return None
    out: dict[str, Any] = {"n": len(views), "source": views[0]["source"]}
    for k in ("gpu", "host", "external", "recomputed", "unknown_tier"):
        vals = [v[k] for v in views if v.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    return out


def _arm_inferencex(rs: list[Result]) -> dict[str, Any] | None:
    """The arm's mean HBM / host / unreused shares as InferenceX's dashboard draws its runs
    (results/reuse.py `inferencex_line`); None when no run carries them."""
    shares = [s for r in rs if (s := (r.inferencex_cache or {}).get("share"))]
    if not shares:
        return None
    out: dict[str, Any] = {"n": len(shares), "combined": any(s["combined"] for s in shares),
                           "source": (rs[0].inferencex_cache or {}).get("source")}
    for k in ("hbm", "host", "unreused"):
        out[k] = sum(s[k] for s in shares) / len(shares)
    return out


def _arm_validity(rs: list[Result]) -> dict[str, Any]:
    flags = sorted({f["code"] for r in rs for f in r.validation.get("flags") or []})
    reasons = sorted({why for r in rs for why in (r.validity or {}).get("reasons") or []})
    out = {"valid": sum(1 for r in rs if r.valid), "stamped": sum(
        1 for r in rs if r.valid is not None), "n": len(rs), "flags": flags, "reasons": reasons}
    judged = [s for r in rs if (s := (r.validity or {}).get("submission"))]
    if judged:
        out["submission"] = {
            "profile": judged[0]["profile"], "n": len(judged),
            "valid": sum(1 for s in judged if s["submission_valid"]),
            "reasons": sorted({why for s in judged for why in s["reasons"]})}
    return out


def compare(results: list[Result], *, by: str | None = "kv_offloading",
            a: dict[str, str] | None = None, b: dict[str, str] | None = None,
            valid_only: bool = False) -> dict[str, Any]:
    """Group successful results into arms (values of `by`, or the selections `a` and `b`),
    pair them on every other identity field, and compute per-metric deltas against the
    first arm. With `valid_only`, runs whose validity stamp says not valid are left out of
    their arm (named per cell under `left_out`), so the valid repeats still give a verdict."""
    ok = [r for r in results if r.status == "ok"]
    if not ok and results:
        failed = results[0]
        why = (failed.failure or {}).get("reason") or f"status {failed.status}"
        raise ResultError(
            f"nothing to compare: none of the {len(results)} result(s) ran to the end (e.g. "
            f"{run_name(failed)}: {why})",
            hint="rerun the sweep (a failed job runs again); each job's result.json says why")
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
        coupled = sorted(COUPLED.get(by, set()))
        # Results sharing the compared value but not a coupled one (two offload backends
        # under kv_offloading=dram) are separate arms, never repeats of one another.
        mixed = {v for v in {field_value(r, by) for r in ok}
                 if len({tuple(field_value(r, c) for c in coupled)
                         for r in ok if field_value(r, by) == v}) > 1}

        def arm_of(r: Result) -> str | None:
            v = field_value(r, by)
            extra = "".join(f",{c}={field_value(r, c)}" for c in coupled) if v in mixed else ""
            return f"{by}={v}{extra}"

        arm_names = sorted({arm_of(r) for r in ok},
                           key=lambda n: [_sort_key(x.partition("=")[2]) for x in n.split(",")])

    for k in list(compared):
        compared |= COUPLED.get(k, set())
    # results of other run options (traces, bounds, engine arguments) or that sent other
    # sessions are other experiments: they never pair with, nor pool as repeats of, these;
    # unless the selections name them (an arm's own engine flag: the Qwen3.5 resident twin's
    # --page-size 16, issue 37)
    key_fields = [f for f in (*IDENTITY, *EXPERIMENT) if f not in compared]
    cells: dict[tuple, dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in ok:
        arm = arm_of(r)
        if arm is not None:
            cells[tuple(field_value(r, f) for f in key_fields)][arm].append(r)
    out_cells, unpaired = [], 0
    for key, arms in sorted(cells.items(), key=lambda kv: [_sort_key(v) for v in kv[0]]):
        left_out: dict[str, list[str]] = {}
        if valid_only:
            for n in list(arms):
                if dropped := [run_name(r) for r in arms[n] if r.valid is False]:
                    left_out[n] = dropped
                    arms[n] = [r for r in arms[n] if r.valid is not False]
                    if not arms[n]:
                        del arms[n]
        present = [n for n in arm_names if n in arms]
        if len(present) < 2:
            unpaired += 1
            continue
        idle = _offload_idle(arms, present)
        validity = {n: _arm_validity(arms[n]) for n in present}
        invalid = {n for n, v in validity.items() if v["stamped"] and v["valid"] < v["n"]}
        rows = []
        for m in METRICS:
            stats = {n: _stats([v for r in arms[n] if (v := m.value(r)) is not None])
                     for n in present}
            if all(s["mean"] is None for s in stats.values()):
                continue
            base = stats[present[0]]
            deltas = {n: _delta(base, stats[n], m.higher_is_better, m.share)
                      for n in present[1:]}
            # an arm some of whose runs lack the metric is a subset of its runs: not the
            # same runs as the other arm's (a wall clock's unresolved ITL), no verdict
            partial = {n: [stats[n]["n"], len(arms[n])] for n in present
                       if stats[n]["n"] < len(arms[n])}
            for n in deltas:
                if (n in partial or present[0] in partial) and deltas[n]["verdict"] != "n/a":
                    deltas[n] = {**deltas[n], "significant": None, "verdict": PARTIAL}
            for n in idle:
                if deltas[n]["verdict"] in ("better", "worse"):
                    deltas[n] = {**deltas[n], "significant": False, "verdict": IDLE}
            for n in deltas:
                if (n in invalid or present[0] in invalid) and deltas[n]["verdict"] not in (
                        "n/a", IDLE):
                    deltas[n] = {**deltas[n], "significant": None, "verdict": NOT_VALID}
            rows.append({"metric": m.label, "higher_is_better": m.higher_is_better,
                         "unit": "pp" if m.share else "%", "metric_unit": m.unit,
                         "share": m.share, "partial": partial,
                         "arms": stats, "deltas": deltas})
        out_cells.append({"key": dict(zip(key_fields, key, strict=True)), "arms": present,
                          "runs": {n: [run_name(r) for r in arms[n]] for n in present},
                          "validity": validity, "left_out": left_out,
                          "cache_reuse": {n: _arm_reuse(arms[n]) for n in present},
                          "inferencex_share": {n: _arm_inferencex(arms[n]) for n in present},
                          "offload_idle": sorted(idle), "metrics": rows})
    return {"compared": sorted(compared), "arms": arm_names, "cells": out_cells,
            "unpaired_cells": unpaired, "confidence": CONFIDENCE,
            # options_id -> the options that tell the sets apart (several sets only; none
            # where the selections name options_id: the arms are the sets)
            "options": {} if "options_id" in compared
            else {str(k): v for k, v in option_labels(ok).items()},
            "options_ids": [] if out_cells or "options_id" in compared
            else _split_by_options(ok, arm_of, [f for f in key_fields if f != "options_id"])}


def _split_by_options(ok: list[Result], arm_of, key_fields: list[str]) -> list[str]:
    """The options_ids of arms that would pair but for their run options (none paired)."""
    arms: dict[tuple, set[str]] = defaultdict(set)
    for r in ok:
        if (arm := arm_of(r)) is not None:
            arms[tuple(field_value(r, f) for f in key_fields)].add(arm)
    if not any(len(a) > 1 for a in arms.values()):
        return []
    return sorted({str(r.options_id) for r in ok if arm_of(r) is not None})


def run_name(r: Result) -> str:
    """A run as its job directory is named: repeats after the first carry `__r<n>`."""
    return f"{r.exp_name}__r{r.repeat}" if r.repeat else r.exp_name


def _label(sel: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sel.items())
