"""The test suite in one process against pytest-xdist's workers (the README's `-n 4`), side by
side.

Runs a fixed sample of the test modules (every Nth module in sorted order, `--every`; 1 is the
whole suite) with `pytest -n 0` and with each other worker count (`--workers`, default 2 and
4), in turn (ABCABC...) so that the machine's other load falls on all alike. For each run:
wall seconds and the CPU seconds of every process it started, Slurm's daemons and job steps
included (they leave the process tree: each process is found by an environment marker and
sampled from /proc every 0.2 s). Prints each run, the medians and each one's ratio to the
`-n 0` run. Linux only. Run:

    PYTHONPATH=src python benchmarks/suite_time.py [--every 5] [--rounds 1] [--workers 2 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HZ = os.sysconf("SC_CLK_TCK")


def modules(every: int) -> list[str]:
    found = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                   if "data" not in p.relative_to(REPO / "tests").parts)
    return found[::every]


def run(argv: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds of `argv` and of every process carrying its marker; exit code."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "KVBENCH_SUITE_TIME": mark}
    tag = f"KVBENCH_SUITE_TIME={mark}".encode()
    seen: dict[tuple[int, int], int] = {}
    marked: dict[tuple[int, int], bool] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                key = (int(pid), int(fields[19]))  # pid and start time: a pid reused is new
                if key not in marked:
                    marked[key] = tag in Path(f"/proc/{pid}/environ").read_bytes()
                if marked[key]:
                    seen[key] = int(fields[11]) + int(fields[12])  # utime + stime, ticks
            except OSError:
                continue
        time.sleep(0.2)
    return time.perf_counter() - t0, sum(seen.values()) / HZ, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=5, help="every Nth test module (1: all)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args()
    chosen = modules(args.every)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen]
    results: dict[str, list[tuple[float, float]]] = {
        f"-n {n}": [] for n in (0, *args.workers)}
    for _ in range(args.rounds):
        for label in results:
            wall, cpu, code = run([*base, *label.split()])
            results[label].append((wall, cpu))
            print(f"{label}: {wall:.0f} s wall, {cpu:.0f} s CPU, exit {code}; load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    walls = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    cpus = {k: statistics.median(c for _, c in v) for k, v in results.items()}
    print(f"{len(chosen)} modules (every {args.every}th), {args.rounds} round(s), "
          f"{os.cpu_count()} CPUs")
    print("| workers | wall s | CPU s | wall x -n 0 | CPU x -n 0 |\n|---|---:|---:|---:|---:|")
    for k in results:
        print(f"| {k} | {walls[k]:.0f} | {cpus[k]:.0f} | {walls[k] / walls['-n 0']:.2f} | "
              f"{cpus[k] / cpus['-n 0']:.2f} |")


if __name__ == "__main__":
    main()
