"""One field's values across snapshots: label matching, replica collapse, counter deltas with
resets, and gauge statistics."""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.metrics.adapter import Adapter, Source
from kvbench.metrics.exposition import Samples

SeriesKey = tuple[tuple[str, str], ...]


def _rank(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def _series_value(source: Source, labels: dict[str, str], value: float,
                  samples: Samples) -> float | None:
    if source.from_labels:
        prod = 1.0
        for name in source.from_labels:
            try:
                prod *= float(labels[name])
            except (KeyError, ValueError):
                return None
        return prod
    if source.times:
        other = samples.get(source.times)
        if not other:
            return None
        return value * other[0][1]
    return value


def select_series(source: Source, adapter: Adapter,
                  samples: Samples) -> dict[SeriesKey, float] | None:
    """The series of `source` in one snapshot, keyed by their non-replica labels; None when
    the metric family is absent. Series differing only in replica labels (TP/PP ranks hold
    copies of one scheduler's numbers) collapse to the lowest rank."""
    raw = samples.get(source.metric)
    if raw is None:
        return None
    patterns = source.label_patterns()
    replicas = adapter.replica_labels
    chosen: dict[SeriesKey, tuple[tuple, float]] = {}
    for labels, value in raw:
        if any(not p.fullmatch(labels.get(k, "")) for k, p in patterns.items()):
            continue
        v = _series_value(source, labels, value, samples)
        if v is None:
            continue
        key = tuple(sorted((k, val) for k, val in labels.items() if k not in replicas))
        rank = tuple(_rank(labels.get(r, "0")) for r in replicas)
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, v)
    return {k: v for k, (_, v) in chosen.items()}


def combine(values: Sequence[float], across: str) -> float:
    if not values:
        return 0.0  # a family with no matching child: that child was never used
    if across == "max":
        return max(values)
    if across == "mean":
        return sum(values) / len(values)
    return sum(values)


def counter_delta(snapshots: Sequence[dict[SeriesKey, float] | None]) -> tuple[float, int]:
    """Sum over series of each series' increase across consecutive snapshots.

    A series absent from a snapshot counts as 0 there (labelled children appear on first
    use); a value lower than the previous one is a reset, after which the new value is all
    increase. Returns (delta, number of resets seen)."""
    prev: dict[SeriesKey, float] = {}
    delta = 0.0
    resets = 0
    first = True
    for snap in snapshots:
        if snap is None:
            snap = {}
        if first:
            prev = dict(snap)
            first = False
            continue
        for key, value in snap.items():
            before = prev.get(key, 0.0)
            if value >= before:
                delta += value - before
            else:
                delta += value
                resets += 1
        prev = dict(snap)
    return delta, resets


def gauge_stats(values: Sequence[float | None]) -> dict[str, float] | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"max": max(present), "mean": sum(present) / len(present), "last": present[-1]}
