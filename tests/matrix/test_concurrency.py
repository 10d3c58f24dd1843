from __future__ import annotations

import pytest

from kvbench.matrix.concurrency import filter_list, filter_plain, filter_range, geometric


@pytest.mark.parametrize("start,end,step,expected", [
    (1, 64, 2, [1, 2, 4, 8, 16, 32, 64]),
    (4, 48, 2, [4, 8, 16, 32, 48]),  # the end is always reached
    (3, 3, 2, [3]),
    (1, 100, 3, [1, 3, 9, 27, 81, 100]),
])
def test_geometric_range(start, end, step, expected):
    assert geometric(start, end, step) == expected


def test_list_filter_substitutes_max_when_nothing_fits():
    assert filter_list([8, 16], None, 4) == [4]
    assert filter_list([1, 8, 16], 8, 12) == [8]
    assert filter_list([1, 2], 4, None) is None
    assert filter_list([1, 2], 0, None) is None


def test_range_filter_clamps_ends_before_expanding():
    assert filter_range(1, 64, 2, 5, None) == [5, 10, 20, 40, 64]
    assert filter_range(8, 64, 2, None, 4) == [4]
    assert filter_range(1, 4, 2, 8, None) is None


def test_agentic_filter_only_drops():
    assert filter_plain([1, 4, 8, 16], 4, 8) == [4, 8]
    assert filter_plain([1, 2], None, 0) == []
