"""How long a full garbage collection stalls the replay's event loop, with and without
`gc.freeze()` (what `kvbench.replay.runner` does before a replay starts).

Run: PYTHONPATH=src python benchmarks/gc_pause.py [--copies 6] [--repeat 5]
The heap is what a sweep's process holds when a replay starts: the bundled Claude Code
sessions loaded through kvbench's one trace loader, `--copies` times (a sweep keeps each job's
workload and results). Baseline: `gc.collect()` over it as is; then the same after
`gc.freeze()`, which moves every existing object out of the collector's generations. The
quickstart's replays showed 48-60 ms full collections as event-loop lag before the freeze."""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from kvbench.sweep.options import bundled_traces
from kvbench.workload import load_trace


def _pause_ms(repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    heap = [load_trace(bundled_traces()) for _ in range(a.copies)]
    objects = len(gc.get_objects())
    before = _pause_ms(a.repeat)
    gc.freeze()
    after = _pause_ms(a.repeat)
    gc.unfreeze()
    print(f"{len(heap)} copies of the bundled sessions, {objects:,} tracked objects")
    print(f"{'full collection':<22} {'us (median)':>12}")
    print(f"{'as is (baseline)':<22} {before * 1e3:12,.0f}")
    print(f"{'after gc.freeze()':<22} {after * 1e3:12,.0f}")
    print(f"{'pause ratio':<22} {before / max(after, 1e-6):11,.0f}x")


if __name__ == "__main__":
    main()
