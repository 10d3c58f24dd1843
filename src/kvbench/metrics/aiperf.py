"""A run's /metrics scrape as AIPerf exports server metrics (`server_metrics_export.json`):
metric families keyed by name, one series per label set, counters as their increase over the
window and gauges as statistics of their samples. InferenceX's aggregation reads this file
(InferenceX 843c6254f, utils/agentic/aggregation/aggregation_common.py:87-211: `metrics` ->
name -> `series` -> `labels`, `stats`); the shape is AIPerf's `ServerMetricsExportData`
(agentx-harness 1.0.12, aiperf/common/models/server_metrics_models.py:423-705,
schema_version 1.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvbench.metrics.series import SeriesKey, counter_delta
from kvbench.metrics.window import counted_snapshots

SCHEMA_VERSION = "1.1"
_COUNTER, _HIST_SUM, _HIST_COUNT = "_total", "_sum", "_count"


def _families(names: set[str]) -> dict[str, tuple[str, list[str]]]:
    """Family name -> (type, its sample names), from the sample names the scrape kept (it
    keeps no TYPE lines, no `_bucket` and no `_created` samples): `X_total` is counter X,
    `X_sum` with `X_count` histogram X, anything else a gauge of that name."""
    out: dict[str, tuple[str, list[str]]] = {}
    for name in sorted(names):
        if name.endswith(_COUNTER):
            out[name[:-len(_COUNTER)]] = ("counter", [name])
        elif name.endswith(_HIST_SUM) and name[:-len(_HIST_SUM)] + _HIST_COUNT in names:
            base = name[:-len(_HIST_SUM)]
            out[base] = ("histogram", [name, base + _HIST_COUNT])
        elif name.endswith(_HIST_COUNT) and name[:-len(_HIST_COUNT)] + _HIST_SUM in names:
            continue
        else:
            out[name] = ("gauge", [name])
    return out


def _by_labels(samples: list[list]) -> dict[SeriesKey, float]:
    return {tuple(sorted(labels.items())): value for labels, value in samples}


def _counter_totals(name: str, snaps: Sequence[dict]) -> dict[SeriesKey, float]:
    """Each series' increase: the first snapshot is the baseline (a child absent there
    starts at 0: engines create labelled children on first use); later snapshots count only
    where they carry the family (the scraper drops unread families from during snapshots)."""
    first, *rest = snaps
    chain = [_by_labels(first["samples"].get(name, []))]
    chain += [_by_labels(s["samples"][name]) for s in rest if name in s["samples"]]
    keys = dict.fromkeys(k for snap in chain for k in snap)
    return {key: counter_delta([{key: v} if (v := snap.get(key)) is not None else {}
                                for snap in chain])[0] for key in keys}


def _gauge_stats(values: list[float]) -> dict[str, float]:
    n = len(values)
    mean = sum(values) / n
    return {"avg": mean, "min": min(values), "max": max(values),
            "std": math.sqrt(sum((v - mean) ** 2 for v in values) / n)}


def _series(key: SeriesKey, stats: dict[str, Any]) -> dict[str, Any]:
    return {"labels": dict(key) if key else None, "stats": stats}


def _summary(snaps: Sequence[dict], endpoint: str | None) -> dict[str, Any]:
    """AIPerf's `ServerMetricsSummary`: the endpoint and the wall-clock window scraped."""
    from datetime import UTC, datetime

    def at(t_ns: Any) -> str | None:
        return datetime.fromtimestamp(t_ns / 1e9, UTC).isoformat() if t_ns else None

    urls = [endpoint] if endpoint else []
    return {"endpoints_configured": urls, "endpoints_successful": urls if snaps else [],
            "start_time": at(snaps[0].get("t_ns")) if snaps else None,
            "end_time": at(snaps[-1].get("t_ns")) if snaps else None}


def server_metrics_export(snapshots: Sequence[dict], endpoint: str | None = None,
                          from_unix_ns: int | None = None) -> dict[str, Any]:
    """The `server_metrics_export.json` body of a scrape (its snapshots in order, pre first;
    `endpoint` the /metrics URL scraped). Gauges are summarised over the during and post
    snapshots (the pre one is the idle server), counters and histograms by their increase
    from pre to post; with `from_unix_ns` (the profiling start after a warm-up) from the last
    snapshot before it, as AIPerf leaves the warm-up out (metrics/window.py), the gauges over
    the snapshots after it. The scrape keeps no HELP text: descriptions are empty."""
    snaps = counted_snapshots(
        [s for s in snapshots if s.get("ok") and isinstance(s.get("samples"), dict)],
        from_unix_ns)
    baseline_first = from_unix_ns is not None
    if len(snaps) < 2:
        return {"schema_version": SCHEMA_VERSION, "summary": _summary(snaps, endpoint),
                "metrics": {}}
    window = snaps[1:] if baseline_first else (
        [s for s in snaps if s.get("phase") != "pre"] or snaps)
    names = {n for s in snaps for n in s["samples"]}
    # a during snapshot keeps only what the adapter reads (scraper.py): as a window's
    # baseline it cannot say where another family stood, so that family is left out rather
    # than counted from zero
    partial = baseline_first and snaps[0].get("phase") == "during"
    metrics: dict[str, Any] = {}
    for family, (kind, members) in _families(names).items():
        if partial and kind != "gauge" and members[0] not in snaps[0]["samples"]:
            continue
        if kind == "counter":
            totals = _counter_totals(members[0], snaps)
            series = [_series(k, {"total": v}) for k, v in totals.items()]
        elif kind == "histogram":
            sums = _counter_totals(members[0], snaps)
            counts = _counter_totals(members[1], snaps)
            series = [_series(k, {"count": round(counts.get(k, 0.0)), "sum": s,
                                  "avg": s / counts[k] if counts.get(k) else None})
                      for k, s in sums.items()]
        else:
            per_key: dict[SeriesKey, list[float]] = {}
            for snap in window:
                for labels, value in snap["samples"].get(family, []):
                    per_key.setdefault(tuple(sorted(labels.items())), []).append(value)
            series = [_series(k, _gauge_stats(v)) for k, v in per_key.items()]
        if series:
            metrics[family] = {"type": kind, "description": "", "series": series}
    return {"schema_version": SCHEMA_VERSION, "summary": _summary(snaps, endpoint),
            "metrics": metrics}


# stat columns per type, in AIPerf's order (aiperf/server_metrics/csv_exporter.py:31-47)
_CSV_STATS = {"gauge": ("avg", "min", "max", "std"), "counter": ("total",),
              "histogram": ("count", "sum", "avg")}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def server_metrics_csv(export: dict[str, Any]) -> str:
    """The same series as AIPerf's `server_metrics_export.csv`: a section per type (gauge,
    counter, histogram) whose header is Endpoint, Type, Metric, Unit, the type's stats, the
    label columns, Description (csv_exporter.py:24-29, :256-325); InferenceX-app's ingest
    reads this file (packages/db/src/etl/agentx-server-metrics/scrape.ts `parseScrapeCsv`)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    buf.write(f"# schema_version: {SCHEMA_VERSION}\n")
    first = True
    for kind, stat_keys in _CSV_STATS.items():
        rows = [(name, s) for name, m in export.get("metrics", {}).items()
                if m["type"] == kind for s in m["series"]]
        if not rows:
            continue
        if not first:
            writer.writerow([])
        first = False
        labels = sorted({k for _, s in rows for k in (s.get("labels") or {})})
        writer.writerow(["Endpoint", "Type", "Metric", "Unit", *stat_keys, *labels,
                         "Description"])
        for name, s in rows:
            writer.writerow(["", kind, name, "", *(_cell(s["stats"].get(k)) for k in stat_keys),
                             *((s.get("labels") or {}).get(k, "") for k in labels), ""])
    return buf.getvalue()
