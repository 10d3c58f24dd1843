"""The largest concurrency that passes, by galloping from a hint and bisecting.

Assumption (stated, not proven): at a fixed configuration, passing is monotone in the number
of live sessions: if C sessions meet the SLO, so does every C' < C (one more session adds
work and cache pressure and never removes any). Under it the search returns the exact
maximum with O(log) probes. A simulated or measured tail that is not monotone (a p90 that
dips at one concurrency) can make the answer a local maximum: the probes are returned so that
a reader can see every point that was tried.

Galloping: from the hint h, probe h; if it passes, probe h+1, h+2, h+4, ... until one fails
or the ceiling passes; if it fails, probe h-1, h-2, h-4, ... until one passes or 1 fails.
Then bisect between the last pass and the first fail. Starting from a good hint (the
previous host size's answer, or the simulator's prediction for a measurement) costs two
probes when the hint is right; from 1 it is the usual exponential search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.errors import CapacityError


@dataclass(slots=True)
class SearchResult:
    max_passing: int  # 0: even one session fails
    first_failing: int | None  # None: the ceiling passes
    probes: list[tuple[int, bool]] = field(default_factory=list)  # in the order tried


def search_max(passes: Callable[[int], bool], *, ceiling: int, hint: int = 1) -> SearchResult:
    """`passes(c)` runs concurrency c and says whether it met the SLO; every c is probed at
    most once; c stays within [1, ceiling]."""
    if ceiling < 1:
        raise CapacityError(f"max-sessions must be >= 1, got {ceiling}")
    seen: dict[int, bool] = {}
    order: list[tuple[int, bool]] = []

    def probe(c: int) -> bool:
        if c not in seen:
            seen[c] = bool(passes(c))
            order.append((c, seen[c]))
        return seen[c]

    h = min(max(hint, 1), ceiling)
    lo, hi = 0, None  # lo passes (0: vacuously), hi fails
    if probe(h):
        lo, step = h, 1
        while lo < ceiling:
            c = min(h + step, ceiling)
            if probe(c):
                lo = c
                step *= 2
            else:
                hi = c
                break
    else:
        hi, step = h, 1
        while hi > 1:
            c = max(h - step, 1)
            if probe(c):
                lo = c
                break
            hi = c
            step *= 2
    if hi is None:
        return SearchResult(ceiling, None, order)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, hi, order)
