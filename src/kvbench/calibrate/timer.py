"""The timing harness every microbenchmark uses: warm up, repeat, take the median.

On CUDA the time comes from device events around each repeat, so launch latency on the host
side does not count unless it starves the GPU; on CPU it comes from perf_counter_ns."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds of one call of the timed function: median over `repeats` runs, and the spread."""

    median_s: float
    min_s: float
    max_s: float
    repeats: int


def is_cuda(device: Any) -> bool:
    return str(device).startswith("cuda")


def synchronize(device: Any) -> None:
    if is_cuda(device):
        import torch

        torch.cuda.synchronize(device)


def time_fn(
    fn: Callable[[], object],
    *,
    device: Any = "cpu",
    warmup: int = 3,
    repeats: int = 10,
) -> Timing:
    """Time `fn()` (which launches work on `device`) `repeats` times after `warmup` calls."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = _cuda_samples(fn, repeats) if is_cuda(device) else _host_samples(fn, repeats)
    return Timing(
        median_s=statistics.median(samples),
        min_s=min(samples),
        max_s=max(samples),
        repeats=repeats,
    )


def _cuda_samples(fn: Callable[[], object], repeats: int) -> list[float]:
    import torch

    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def _host_samples(fn: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e9)
    return samples


def time_once(fn: Callable[[], object], *, device: Any = "cpu") -> float:
    """Wall seconds of one call, device synchronized before and after (for one-shot costs
    such as pinning memory, which cannot be repeated on the same buffer)."""
    synchronize(device)
    t0 = time.perf_counter_ns()
    fn()
    synchronize(device)
    return (time.perf_counter_ns() - t0) / 1e9
