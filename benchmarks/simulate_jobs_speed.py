"""`kvbench simulate-jobs` over every agentic row of the InferenceX configs with the default
workload (the AgentX-shaped corpus sized to each row, AgentX's bounds), in CPU seconds.

Wall time on a shared machine says little; CPU seconds per row do not depend on what else
runs. The rows run in this one process in the order simulate-jobs' workers take them (twin
groups, heaviest first), each timed with `time.process_time()`. Printed: the total CPU, the
heaviest groups, and the makespan the groups would take on `--cores` workers (the groups
assigned greedily as simulate-jobs' process pool does, each to the first free worker).

    PYTHONPATH=src python benchmarks/simulate_jobs_speed.py [--cores 2] [--out FILE.json]
        [--every N]   # every N-th group only (a quick estimate, scaled up)
        [--entries FILE.json]  # every row's simulated entry by exp-name (identity checks)
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from pathlib import Path

from kvbench.capacity import jobs as sim_jobs
from kvbench.files import write_json_atomic
from kvbench.matrix import select_jobs
from kvbench.matrix.selection import Selection
from kvbench.workload.choice import parse_trace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "inferencex"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--entries", type=Path,
                    help="write every row's entry (keyed by exp-name) here, for comparing "
                         "two versions' results")
    args = ap.parse_args()
    sel = Selection(config_files=(DATA / "nvidia-master.yaml", DATA / "amd-master.yaml"),
                    runner_config=DATA / "runners.yaml", scenario_types=("agentic-coding",))
    jobs = select_jobs(sel)
    source = parse_trace(None)
    groups = sim_jobs._groups(jobs)[::args.every]
    sim_jobs._init_worker(source, {}, "agentx", "write_through")
    timed = []
    by_row: dict[str, dict] = {}
    cpu0 = time.process_time()
    for g in groups:
        c0 = time.process_time()
        entries = sim_jobs._run_group(g)
        cpu = time.process_time() - c0
        by_row.update((e["exp-name"], e) for _, e in entries)
        reqs = sum(s["requests"] + s["warmup_requests"] for _, e in entries
                   for s in (e.get("arms") or {}).values() if "same_as_resident" not in s)
        timed.append({"rows": [e["exp-name"] for _, e in entries], "cpu_s": cpu,
                      "requests": reqs, "skipped": [e.get("skipped") for _, e in entries]})
        print(f"{len(timed)}/{len(groups)} groups, {sum(t['cpu_s'] for t in timed):.0f} CPU-s",
              flush=True)
    total = time.process_time() - cpu0
    workers = [0.0] * args.cores
    heapq.heapify(workers)
    for t in timed:  # the order the pool hands them out: heaviest first
        heapq.heappush(workers, heapq.heappop(workers) + t["cpu_s"])
    doc = {"rows": sum(len(g) for g in groups), "groups": len(groups), "every": args.every,
           "cpu_s": total, "cpu_s_all_rows_estimate": total * args.every,
           "requests": sum(t["requests"] for t in timed),
           "makespan_s": max(workers), "makespan_s_estimate": max(workers) * args.every,
           "cores": args.cores, "heaviest": sorted(timed, key=lambda t: -t["cpu_s"])[:10]}
    if args.out:
        write_json_atomic(args.out, doc)
    if args.entries:
        # wall_s and requests_per_wall_s are the host's timing, not simulated results
        write_json_atomic(args.entries, _without_timing(by_row))
    print(json.dumps({k: v for k, v in doc.items() if k != "heaviest"}, indent=1))
    for t in doc["heaviest"]:
        print(f"{t['cpu_s']:8.1f} CPU-s {t['requests']:>8,} requests  {', '.join(t['rows'])}")


def _without_timing(x):
    if isinstance(x, dict):
        return {k: _without_timing(v) for k, v in x.items()
                if k not in ("wall_s", "requests_per_wall_s")}
    if isinstance(x, list):
        return [_without_timing(v) for v in x]
    return x


if __name__ == "__main__":
    main()
