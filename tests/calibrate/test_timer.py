from __future__ import annotations

import time

import pytest

from kvbench.calibrate.timer import time_fn, time_once


def test_time_fn_warms_up_then_takes_the_median():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    timing = time_fn(fn, warmup=2, repeats=5)
    assert len(calls) == 7
    assert timing.repeats == 5
    assert 0.002 <= timing.min_s <= timing.median_s <= timing.max_s < 1.0


def test_time_fn_rejects_zero_repeats():
    with pytest.raises(ValueError):
        time_fn(lambda: None, repeats=0)


def test_time_once_measures_one_call():
    assert 0.003 <= time_once(lambda: time.sleep(0.003)) < 60  # upper: a hang guard
