"""How long `kvbench plan` takes over every agentic row of the real InferenceX configs.

Baseline, side by side: `kvbench matrix` over the same selection (load + validate + expand the
recipes, the part planning cannot avoid). The difference is the planner's own cost. Run:

    PYTHONPATH=src python benchmarks/plan_all_rows.py [--repeat 5]

Reports wall time and CPU time (user + sys of the child) per command; the issue's bar is
< 2 s for `kvbench plan` over all agentic rows. CPU time is the stable figure on a shared
machine; wall time includes waiting for a core."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "inferencex"


def run(command: str) -> tuple[float, float]:
    args = [sys.executable, "-m", "kvbench", command,
            "--config-files", str(DATA / "amd-master.yaml"),
            "--config-files", str(DATA / "nvidia-master.yaml"), "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def in_process() -> tuple[int, float]:
    sys.path.insert(0, str(REPO / "src"))
    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job
    from kvbench.recipe import load_runners

    jobs = select_jobs(Selection(config_files=(DATA / "amd-master.yaml",
                                               DATA / "nvidia-master.yaml"),
                                 runner_config=DATA / "runners.yaml"))
    runners = load_runners(DATA / "runners.yaml")
    plan_job(jobs[0], runners)  # warm the model and hardware caches
    start = time.perf_counter()
    for job in jobs:
        plan_job(job, runners)
    return len(jobs), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    results = {cmd: [run(cmd) for _ in range(repeat)] for cmd in ("matrix", "plan")}
    print(f"{'command':<10} {'wall median s':>14} {'cpu median s':>13} {'cpu min s':>10}")
    for cmd, samples in results.items():
        walls, cpus = zip(*samples, strict=True)
        print(f"{cmd:<10} {statistics.median(walls):>14.3f} {statistics.median(cpus):>13.3f} "
              f"{min(cpus):>10.3f}")
    base = statistics.median(c for _, c in results["matrix"])
    plan = statistics.median(c for _, c in results["plan"])
    print(f"plan / matrix CPU ratio: {plan / base:.2f}x (planner adds {plan - base:.3f} s)")
    rows, seconds = in_process()
    print(f"in-process plan_job: {rows} rows in {seconds:.3f} s "
          f"({seconds / rows * 1e3:.2f} ms per row)")
    verdict = "PASS" if plan < 2.0 else "FAIL"
    print(f"{verdict}: kvbench plan over all agentic rows, median CPU {plan:.3f} s (bar: < 2 s)")


if __name__ == "__main__":
    main()
