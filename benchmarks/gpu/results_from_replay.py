"""Turn the H200 `kvbench replay` runs against `transformers serve` into result.json files
and one dashboard, so the GPU runs read like any other kvbench results.

    PYTHONPATH=src python benchmarks/gpu/results_from_replay.py benchmarks/results/h200/replay \
        --out benchmarks/results/h200/results

`transformers serve` has no engine adapter (no recipe row), so each run gets the row it would
have had: random-weight Qwen3-8B, bf16, one H200, GPU-resident, at the run's concurrency."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from kvbench.files import read_json
from kvbench.report import write_dashboard
from kvbench.results import build_result, write_result


def row_for(conc: int) -> dict:
    return {
        "image": "transformers-5.24-serve", "model": "Qwen/Qwen3-8B (random weights)",
        "model-prefix": "qwen3-8b-random", "precision": "bf16", "framework": "transformers",
        "runner": "h200", "tp": 1, "pp": 1, "dcp-size": 1, "pcp-size": 1, "ep": 1,
        "dp-attn": False, "spec-decoding": "none", "conc": conc, "kv-offloading": "none",
        "total-cpu-dram-gb": 0, "duration": 0,
        "exp-name": f"qwen3-8b-random_tp1_conc{conc}_kvnone",
        "scenario-type": "agentic-coding",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("replay_dir", type=Path, help="folder of c<N>/ replay outputs")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for run in sorted(args.replay_dir.glob("c*/summary.json")):
        conc = int(run.parent.name.lstrip("c").split("-")[0].split("_")[0])
        row = row_for(conc)
        summary = read_json(run)
        fp = hashlib.sha256(run.read_bytes()).hexdigest()[:16]
        result = build_result(job_row=row, config_key="h200-transformers-serve",
                              plan=None, summary=summary, server=None, telemetry=None,
                              status="ok", fingerprint=fp,
                              warnings=["transformers serve reports no cached tokens and no "
                                        "/metrics: server panels are empty"])
        path = write_result(args.out / f"{row['exp-name']}__{run.parent.name}", result)
        print(path, result.status)
    print(write_dashboard([args.out], args.out / "dashboard.html"))


if __name__ == "__main__":
    main()
