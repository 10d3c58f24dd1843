from __future__ import annotations

import pytest

from kvbench.calibrate.matmul import fp8_supported, time_matmul

pytestmark = pytest.mark.usefixtures("torch")  # skipped without torch


def test_cpu_matmul_rate_is_two_mnk_over_time():
    point = time_matmul("fp32", 64, 32, 16, device="cpu", warmup=1, repeats=3)
    assert point.flops_per_s == pytest.approx(2 * 64 * 32 * 16 / point.timing.median_s)


def test_fp8_needs_cuda():
    assert not fp8_supported("cpu")
