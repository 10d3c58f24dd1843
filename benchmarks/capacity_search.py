"""How fast `kvbench capacity` answers on the quickstart row, and what the search saves.

Side by side on the quickstart's offload row (Qwen3-8B, one simulated H100, HiCache host
tier from 0 to the planner's 67 GB in 9 sizes), for two synthetic workloads of 64 sessions
(full-size contexts, the command's default; and contexts x 0.25, where far more sessions fit):
- `kvbench`: gallop + bisect per size, each size starting from the previous size's answer;
- `no-hint`: the same search starting from 1 at every size;
- `linear` (baseline): probe 1, 2, 3, ... until the SLO breaks, at every size.
Where meeting the SLO is monotone in sessions the three find the same curve; where it is
not (a p90 that passes at 24 sessions after failing at 22), bisection may return a larger
answer than the linear scan's first failure: the last column names the sizes that differ.
Then the command itself end to end (`kvbench capacity --config-files
examples/quickstart.yaml`, a fresh process, start-up included). Run:

    PYTHONPATH=src python benchmarks/capacity_search.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvbench.capacity import Slo, WorkloadBounds, host_grid, sessions_to_traces
from kvbench.capacity.predict import simulate_step
from kvbench.capacity.search import search_max
from kvbench.capacity.target import target_from_job
from kvbench.matrix import select_jobs
from kvbench.matrix.selection import Selection
from kvbench.recipe import load_runners
from kvbench.workload import SyntheticSpec, generate_sessions

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "examples" / "quickstart.yaml"
RUNNERS = REPO / "examples" / "runners.yaml"
SLO = Slo(ttft_p90_ms=2000.0)


def _linear(passes, ceiling: int) -> int:
    c = 0
    while c < ceiling and passes(c + 1):
        c += 1
    return c


def curve(target, traces, strategy: str) -> tuple[list[int], int, float, float]:
    probes = 0
    out = []
    hint = 1
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for gb in host_grid(target.budget_gb, 8):
        tier = target.tier(gb)

        def passes(c: int, tier=tier) -> bool:
            nonlocal probes
            probes += 1
            return simulate_step(target, tier, traces, SLO, c).passed

        if strategy == "linear":
            best = _linear(passes, len(traces))
        else:
            best = search_max(passes, ceiling=len(traces),
                              hint=hint if strategy == "kvbench" else 1).max_passing
        out.append(best)
        hint = max(best, 1)
    return out, probes, time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sel = Selection(config_files=(RECIPE,), runner_config=RUNNERS)
    job = next(j for j in select_jobs(sel) if j.kv_offloading != "none")
    target = target_from_job(job, load_runners(RUNNERS))
    print(f"load average {os.getloadavg()[0]:.1f}; target {target.label}, host sizes "
          f"{host_grid(target.budget_gb, 8)} GB; SLO {SLO.describe()}")
    print("| workload | search | sessions per size | probes | wall median s | CPU median s | "
          "sizes differing from linear |")
    print("|---|---|---|---:|---:|---:|---|")
    for scale in (1.0, 0.25):
        traces = sessions_to_traces(
            generate_sessions(SyntheticSpec(num_sessions=64, scale=scale)), WorkloadBounds())
        ref = None
        for strategy in ("linear", "no-hint", "kvbench"):
            runs = [curve(target, traces, strategy) for _ in range(args.repeat)]
            got, probes = runs[0][0], runs[0][1]
            ref = ref or got
            grid = host_grid(target.budget_gb, 8)
            differ = [f"{g:g} GB" for g, a, b in zip(grid, got, ref, strict=True) if a != b]
            print(f"| synthetic 64 x{scale:g} | {strategy} | {got} | {probes} | "
                  f"{statistics.median(r[2] for r in runs):.2f} | "
                  f"{statistics.median(r[3] for r in runs):.2f} | "
                  f"{', '.join(differ) or 'none'} |")
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvbench", "capacity", "--config-files",
                        str(RECIPE), "--format", "json"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        walls.append(time.perf_counter() - t0)
    print(f"\n`kvbench capacity --config-files examples/quickstart.yaml` end to end: wall "
          f"median {statistics.median(walls):.2f} s (min {min(walls):.2f}, max {max(walls):.2f})"
          f" over {args.repeat} runs; bar: < 30 s")


if __name__ == "__main__":
    main()
