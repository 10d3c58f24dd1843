"""Concurrency values of a row: the list as written, or the geometric conc-start..conc-end
range, then the selection's --min-conc/--max-conc with the reference's quirks per path."""

from __future__ import annotations

from typing import Any


def geometric(start: int, end: int, step: int) -> list[int]:
    """start, start*step, ... clipped so that `end` is always the last value."""
    values = []
    conc = start
    while conc <= end:
        values.append(conc)
        if conc == end:
            break
        conc *= step
        if conc > end:
            conc = end
    return values


def written(row: dict[str, Any], step: int) -> list[int]:
    """The row's concurrencies before any selection filter."""
    if row.get("conc-list"):
        return list(row["conc-list"])
    return geometric(row["conc-start"], row["conc-end"], step)


def filter_list(values: list[int], min_conc: int | None, max_conc: int | None) -> list[int] | None:
    """Fixed-seq-len filter: drop below min; above max, and if nothing is left, run at max
    itself. None means skip the row (a non-positive bound skips, as in the reference)."""
    if min_conc is not None:
        if min_conc <= 0:
            return None
        values = [c for c in values if c >= min_conc]
        if not values:
            return None
    if max_conc is not None:
        if max_conc <= 0:
            return None
        kept = [c for c in values if c <= max_conc]
        values = kept or [max_conc]
    return values


def filter_range(start: int, end: int, step: int, min_conc: int | None,
                 max_conc: int | None) -> list[int] | None:
    """Fixed-seq-len single-node range filter: clamp the range ends, then expand."""
    if min_conc is not None:
        if min_conc <= 0 or end < min_conc:
            return None
        start = max(start, min_conc)
    if max_conc is not None:
        if max_conc <= 0:
            return None
        if start > max_conc:
            start = end = max_conc
        else:
            end = min(end, max_conc)
    return geometric(start, end, step)


def filter_plain(values: list[int], min_conc: int | None, max_conc: int | None) -> list[int]:
    """Agentic filter: keep values within the bounds, nothing substituted."""
    if min_conc is not None:
        values = [c for c in values if c >= min_conc]
    if max_conc is not None:
        values = [c for c in values if c <= max_conc]
    return values


def only(values: list[int], concs: tuple[int, ...]) -> list[int]:
    """test-config's --conc: the values among `concs`, order kept (all when none given)."""
    return [c for c in values if c in concs] if concs else values
