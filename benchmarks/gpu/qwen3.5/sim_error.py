"""Issue 37 item 5: the simulator against the Qwen3.5 runs. Two predictions per (conc, arm):
the one committed before the runs (`predictions.txt`, `predict.sh` at kvbench 0dd7113) and
today's (`predict.sh`'s `kvbench simulate` command run again with this kvbench, JSON), each
against the measured run (the mean of its repeats: hicache conc 8 has two). Nothing is fitted
to these runs: the engine profile is the Qwen3-8B probe fit of issue 25
(results/h200/sglang/engine-sglang-h200-triton.yaml).

Measured: TTFT p50/p90 and throughput from each result.json's request metrics, hit rates from
the engine's tier counters over its prompt tokens (`cached_tokens_by_tier`). Simulated hit
rates are first-scheduling hits over the simulated prompt tokens. The error is (sim - real) /
real for times and rates of tokens, percentage points for hit rates.

    PYTHONPATH=src python benchmarks/gpu/qwen3.5/sim_error.py \
        > benchmarks/results/h200/qwen3.5/sim-error.txt
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RUNS = ROOT / "benchmarks/results/h200/qwen3.5/runs"
# the measured runs of each (conc, simulated arm); the unpatched HiCache arm has the patched
# arm's setting, so the same simulation
JOBS = {(4, "resident"): ["resident-c4"], (4, "offload"): ["hicache-c4"],
        (4, "offload (unpatched)"): ["unpatched-c4"], (8, "resident"): ["resident-c8"],
        (8, "offload"): ["hicache-c8-a", "hicache-c8-b"]}
METRICS = ("requests", "hit_host", "hit_total", "ttft_p50_ms", "ttft_p90_ms", "input_tok_s",
           "output_tok_s")
PREDICTED_ROWS = {"requests (errors)": "requests", "hit rate host": "hit_host",
                  "hit rate total": "hit_total", "ttft p50 (ms)": "ttft_p50_ms",
                  "ttft p90 (ms)": "ttft_p90_ms", "input tok/s": "input_tok_s",
                  "output tok/s": "output_tok_s"}


def _number(cell: str) -> float:
    text = cell.strip().split(" ")[0].replace(",", "")
    return float(text.rstrip("%")) / 100 if text.endswith("%") else float(text)


def committed() -> dict[tuple[int, str], dict[str, float]]:
    """The tables of predictions.txt, per --concurrency block."""
    out: dict[tuple[int, str], dict[str, float]] = {}
    conc = 0
    for line in (HERE / "predictions.txt").read_text().splitlines():
        if m := re.match(r"== --concurrency (\d+)", line):
            conc = int(m[1])
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0] in PREDICTED_ROWS:
            for arm, cell in zip(("resident", "offload"), cells[1:], strict=True):
                out.setdefault((conc, arm), {})[PREDICTED_ROWS[cells[0]]] = _number(cell)
    return out


def today() -> dict[tuple[int, str], dict[str, float]]:
    """predict.sh's command, run with this kvbench (JSON)."""
    command = (HERE / "predict.sh").read_text()
    args = re.search(r"python3 -m kvbench simulate (.*?)--concurrency", command, re.S)[1]
    argv = [a for a in args.replace("\\\n", " ").split() if a]
    argv = [str(ROOT / "benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml")
            if a == "$P" else a for a in argv]
    out = {}
    for conc in (4, 8):
        done = subprocess.run(
            [sys.executable, "-m", "kvbench", "simulate", *argv, "--concurrency", str(conc),
             "--duration", "50", "--write-policy", "write_through_selective", "--format",
             "json"], cwd=ROOT, capture_output=True, text=True, check=True)
        for arm, s in json.loads(done.stdout)["arms"].items():
            out[(conc, arm)] = {
                "requests": s["requests"], "hit_host": s["hit_rate"]["host"],
                "hit_total": s["hit_rate"]["total"], "ttft_p50_ms": s["ttft_ms"]["p50"],
                "ttft_p90_ms": s["ttft_ms"]["p90"],
                "input_tok_s": s["throughput"]["input_tok_s"],
                "output_tok_s": s["throughput"]["output_tok_s"]}
    return out


def measured(job: str) -> dict[str, float]:
    r = json.loads((RUNS / job / "result.json").read_text())
    m, s = r["request_metrics"], r["server_metrics"]
    prompt, tiers = s["tokens"]["prompt_total"], s["cache"]["cached_tokens_by_tier"]
    host = (tiers["host"] or 0) + (tiers["external"] or 0)
    return {"requests": m["latency"]["ttft_ms"]["n"], "hit_host": host / prompt,
            "hit_total": ((tiers["device"] or 0) + host) / prompt,
            "ttft_p50_ms": m["latency"]["ttft_ms"]["p50"],
            "ttft_p90_ms": m["latency"]["ttft_ms"]["p90"],
            "input_tok_s": m["throughput"]["input_tok_s"],
            "output_tok_s": m["throughput"]["output_tok_s"]}


def _error(metric: str, sim: float, real: float) -> str:
    if metric.startswith("hit"):
        return f"{(sim - real) * 100:+.1f} pt"
    return f"{(sim / real - 1) * 100:+.0f}%"


def _cell(metric: str, value: float) -> str:
    if metric.startswith("hit"):
        return f"{value * 100:.1f}%"
    return f"{value:,.0f}" if value >= 100 or metric == "requests" else f"{value:,.1f}"


def main() -> int:
    before, now = committed(), today()
    print("| conc | arm (runs) | metric | measured | predicted before (error) | today (error) |")
    print("|---:|---|---|---:|---:|---:|")
    rows = []
    for (conc, arm), jobs in JOBS.items():
        runs = [measured(j) for j in jobs]
        real = {k: statistics.fmean(r[k] for r in runs) for k in METRICS}
        sim_arm = arm.split(" ")[0]
        for k in METRICS:
            a, b = before[(conc, sim_arm)][k], now[(conc, sim_arm)][k]
            print(f"| {conc} | {arm} ({', '.join(jobs)}) | {k} | {_cell(k, real[k])} | "
                  f"{_cell(k, a)} ({_error(k, a, real[k])}) | {_cell(k, b)} "
                  f"({_error(k, b, real[k])}) |")
        rows.append({"conc": conc, "arm": arm, "jobs": jobs, "measured": real,
                     "predicted_before": before[(conc, sim_arm)], "today": now[(conc, sim_arm)]})
    print("\noffload / resident (measured; predicted before; today):")
    for conc in (4, 8):
        res = next(r for r in rows if r["conc"] == conc and r["arm"] == "resident")
        off = next(r for r in rows if r["conc"] == conc and r["arm"] == "offload")
        for k in ("ttft_p50_ms", "output_tok_s"):
            cells = [off[s][k] / res[s][k] for s in ("measured", "predicted_before", "today")]
            print(f"  conc {conc} {k:<13} " + "; ".join(f"{c:.3f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
