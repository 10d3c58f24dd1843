"""`kvbench capacity` with every default on each single-node agentic key of the shipped
InferenceX configs (tests/data/inferencex, 843c6254f) that has an offload row: exit 0, a
prediction and a knee per row (issue 26's acceptance), with each key's wall and CPU time.

This was a CI test (tests/capacity/test_real_rows.py) until the suite's time was cut (issue 38):
it is ~930 simulated probes, a third of the suite's CPU time, and more since the default
workload became the AgentX-shaped corpus sized to each row. CI now runs every key on a small
explicit workload (`--trace bundled --bounds once --max-turns 4 --points 3`); this script
runs what a user gets with no option (every default, the full grid).
One process per key, as many at once as there are CPUs. Run:

    PYTHONPATH=src python benchmarks/capacity_real_rows.py [--keys GLOB...]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "inferencex"
RUNNERS = DATA / "runners.yaml"


def offload_keys() -> list[tuple[str, str]]:
    from kvbench.capacity.target import offload_rows
    from kvbench.matrix import select_jobs
    from kvbench.matrix.selection import Selection

    out = []
    for vendor in ("nvidia", "amd"):
        sel = Selection(config_files=(DATA / f"{vendor}-master.yaml",), runner_config=RUNNERS)
        rows = offload_rows(select_jobs(sel))
        out += sorted({(vendor, j.config_key) for j in rows if "agentic" in str(j.scenario)})
    return out


def run_key(vendor: str, key: str) -> dict:
    """One `kvbench capacity` with defaults: exit code, wall, probes, sessions per size."""
    argv = [sys.executable, "-m", "kvbench", "capacity", "--config-files",
            str(DATA / f"{vendor}-master.yaml"), "--runner-config", str(RUNNERS),
            "--config-keys", key, "--format", "json"]
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    result = {"key": key, "exit": res.returncode, "wall_s": time.perf_counter() - t0}
    if res.returncode == 0:
        body = json.loads(res.stdout)
        docs = body if isinstance(body, list) else [body]
        result["rows"] = [{"label": d["target"]["label"], "knee": d["knee"]["text"],
                           "probes": sum(len(p["steps"]) for p in d["predicted"]),
                           "sessions": [p["max_sessions"] for p in d["predicted"]]}
                          for d in docs]
        result["ok"] = bool(docs) and all(d["predicted"] and d["knee"]["text"] for d in docs)
    else:
        result["ok"] = False
        result["error"] = res.stderr[-1500:]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", nargs="*", default=["*"], help="fnmatch globs of config keys")
    args = ap.parse_args()
    keys = [(v, k) for v, k in offload_keys() if any(fnmatch.fnmatch(k, g) for g in args.keys)]
    start = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda vk: run_key(*vk), keys))
    wall = time.perf_counter() - t0
    end = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("| key | exit | rows | probes | wall s | knee (first row) |\n"
          "|---|---:|---:|---:|---:|---|")
    for r in results:
        rows = r.get("rows", [])
        print(f"| {r['key']} | {r['exit']} | {len(rows)} | {sum(x['probes'] for x in rows)} | "
              f"{r['wall_s']:.1f} | {rows[0]['knee'] if rows else r.get('error', '')[:80]} |")
    cpu = (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)
    failed = [r["key"] for r in results if not r["ok"]]
    print(f"\n{len(results)} keys, {len(failed)} failed {failed}; {wall:.0f} s wall, "
          f"{cpu:.0f} s CPU with {os.cpu_count()} processes at once; load average "
          f"{os.getloadavg()[0]:.1f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
