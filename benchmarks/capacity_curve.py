"""One host size's simulated capacity probes at every concurrency asked, as `kvbench capacity`
runs each (its default workload: the corpus sized to 1,024 lanes, AgentX's bounds; TTFT p90
<= 2 s): the curve a search walks, to test search strategies offline. One JSON line per
probe (pass, the step's metrics, its CPU seconds), appended as each ends.

    PYTHONPATH=src python benchmarks/capacity_curve.py KEY HOST_GB 8,16,100-170 OUT.jsonl
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson

from kvbench.capacity import Slo
from kvbench.capacity.jobs import row_bounds
from kvbench.capacity.predict import simulate_step
from kvbench.capacity.target import offload_rows, target_from_job
from kvbench.matrix import select_jobs
from kvbench.matrix.generate import selection_runners
from kvbench.matrix.selection import Selection
from kvbench.sim.engine_config import EngineConfig
from kvbench.workload.choice import first_turns, parse_trace

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "inferencex"


def _concurrencies(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key")
    ap.add_argument("host_gb", type=float)
    ap.add_argument("concurrencies", type=_concurrencies)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    sel = Selection(config_files=(DATA / "nvidia-master.yaml", DATA / "amd-master.yaml"),
                    runner_config=DATA / "runners.yaml", config_keys=(args.key,))
    target = target_from_job(offload_rows(select_jobs(sel))[0], selection_runners(sel),
                             EngineConfig(), None)
    source = parse_trace(None)
    sessions = first_turns(source.sessions_for(target.model_prefix, 1024), None)
    tier, slo = target.tier(args.host_gb), Slo(ttft_p90_ms=2000.0)
    for c in args.concurrencies:
        c0 = time.process_time()
        step = simulate_step(target, tier, sessions, row_bounds, slo, c)
        line = {"gb": args.host_gb, "c": c, "passed": step.passed,
                "cpu_s": time.process_time() - c0, **step.metrics}
        with args.out.open("ab") as f:
            f.write(orjson.dumps(line) + b"\n")


if __name__ == "__main__":
    main()
