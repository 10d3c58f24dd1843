"""The concurrency search: exact maximum of a monotone predicate from any hint, each
concurrency probed once, O(log) probes."""

from __future__ import annotations

import math

import pytest

from kvbench.capacity.search import search_max
from kvbench.errors import CapacityError


@pytest.mark.parametrize("hint", [1, 3, 7, 8, 20, 64])
@pytest.mark.parametrize("true_max", [0, 1, 7, 8, 31, 64])
def test_exact_maximum_from_any_hint(true_max, hint):
    calls = []

    def passes(c):
        calls.append(c)
        assert 1 <= c <= 64
        return c <= true_max

    r = search_max(passes, ceiling=64, hint=hint)
    assert r.max_passing == true_max
    assert r.first_failing == (None if true_max == 64 else true_max + 1)
    assert len(calls) == len(set(calls))  # every concurrency at most once
    assert len(calls) <= 2 * math.ceil(math.log2(64)) + 2
    assert [c for c, _ in r.probes] == calls


def test_a_right_hint_costs_two_probes():
    r = search_max(lambda c: c <= 7, ceiling=64, hint=7)
    assert r.probes == [(7, True), (8, False)]


def test_from_one_it_gallops_then_bisects():
    r = search_max(lambda c: c <= 6, ceiling=64)
    # 1, 1+1, 1+2, 1+4 pass; 1+8 fails; bisect 5..9 -> 7 fails, 6 passes
    assert r.probes == [(1, True), (2, True), (3, True), (5, True), (9, False), (7, False),
                        (6, True)]
    assert r.max_passing == 6


def test_ceiling_must_be_positive():
    with pytest.raises(CapacityError, match="max-sessions must be >= 1"):
        search_max(lambda c: True, ceiling=0)
