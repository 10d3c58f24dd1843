"""Predicted (kvbench simulate's engine) vs measured (kvbench replay records) for the same
requests: TTFT, TPOT, E2E and output throughput, with the relative error of each.

The simulator replays exactly the (session, turn) pairs the real run sent, in the same lane
order and closed loop, from the same derived trace files; metrics are compared over the
requests that completed in the real run. Needs a tree with kvbench.sim and kvbench.models.

    python benchmarks/gpu/compare_sim.py --trace DIR --runs C=RUN_DIR ... \\
        --model Qwen/Qwen3-8B --hardware h200-measured --out compare.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
from pathlib import Path


def _records(run_dir: Path) -> list[dict]:
    with open(run_dir / "records.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def _sent_subset(trace_dir: Path, records: list[dict], out: Path) -> dict[str, int]:
    """Write each touched session cut after its last sent turn; return session -> turns."""
    last: dict[str, int] = {}
    for r in records:
        last[r["session_id"]] = max(last.get(r["session_id"], -1), r["turn"])
    for sid, turn in last.items():
        with gzip.open(trace_dir / f"{sid}.json.gz", "rt") as f:
            doc = json.load(f)
        doc["requests"] = doc["requests"][: turn + 1]
        with gzip.open(out / f"{sid}.json.gz", "wt") as f:
            json.dump(doc, f)
    return {sid: t + 1 for sid, t in last.items()}


def _stats(rows: list[dict]) -> dict:
    def p50(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.median(vals) if vals else None

    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.fmean(vals) if vals else None

    span = max(r["end_s"] for r in rows) - min(r["start_s"] for r in rows)
    return {
        "requests": len(rows),
        "ttft_ms_p50": p50("ttft_ms"), "ttft_ms_mean": mean("ttft_ms"),
        "tpot_ms_p50": p50("tpot_ms"), "tpot_ms_mean": mean("tpot_ms"),
        "e2e_ms_p50": p50("e2e_ms"),
        "output_tok_s": sum(r["out"] for r in rows) / span,
    }


def _measured(records: list[dict]) -> dict[tuple[str, int], dict]:
    rows = {}
    for r in records:
        if r["status"] != "ok":
            continue
        n = r["completion_tokens"] or len(r["chunk_ns"])
        rows[(r["session_id"], r["turn"])] = {
            "ttft_ms": (r["t_first_ns"] - r["t_send_ns"]) / 1e6,
            "tpot_ms": (r["t_last_ns"] - r["t_first_ns"]) / 1e6 / (n - 1) if n > 1 else None,
            "e2e_ms": (r["t_last_ns"] - r["t_send_ns"]) / 1e6,
            "out": n, "start_s": r["t_send_ns"] / 1e9, "end_s": r["t_last_ns"] / 1e9,
        }
    return rows


def _predicted(subset_dir: Path, model: str, hardware: str, concurrency: int,
               step_overhead_ms: float | None, layer_efficiency: bool = False) -> dict:
    from dataclasses import replace

    from kvbench.sim.cache import TieredCache
    from kvbench.sim.engine import EngineConfig
    from kvbench.sim.simulate import SimSetup, _drive
    from kvbench.sim.sizing import gpu_tier_tokens, resolve_costs
    from kvbench.sim.trace import expand_paths, load_traces

    costs = resolve_costs(model, hardware, 1)
    if step_overhead_ms is not None:
        costs = replace(costs, step_overhead_s=step_overhead_ms / 1e3)
    if layer_efficiency:
        # what torch kernels reach per layer (calibrate's layer timings): prefill is compute-
        # bound, decode memory-bound, so each phase's efficiency scales its ceiling
        from kvbench.hardware import load_hardware

        hw = load_hardware(hardware)
        costs = replace(costs, flops_per_s=costs.flops_per_s * hw.layer_efficiency("prefill"),
                        hbm_bytes_per_s=costs.hbm_bytes_per_s * hw.layer_efficiency("decode"))
    names = [p.name.removesuffix(".json.gz") for p in expand_paths([subset_dir])]
    sessions = [s for tr in load_traces([subset_dir]) for s in tr.sessions if s]
    setup = SimSetup(gpu_tier_tokens(costs, hardware), 0, "write_through", concurrency,
                     EngineConfig())
    done: list = []
    _drive(sessions, TieredCache(setup.gpu_tokens, 0, setup.write_policy), costs, setup, done)
    rows, turn_of = {}, {}
    for req in sorted(done, key=lambda r: (r.session, r.arrival_s)):
        turn = turn_of.get(req.session, 0)
        turn_of[req.session] = turn + 1
        n = req.output_tokens
        rows[(names[req.session], turn)] = {
            "ttft_ms": (req.first_s - req.arrival_s) * 1e3,
            "tpot_ms": (req.finish_s - req.first_s) * 1e3 / (n - 1) if n > 1 else None,
            "e2e_ms": (req.finish_s - req.arrival_s) * 1e3,
            "out": n, "start_s": req.arrival_s, "end_s": req.finish_s,
        }
    return rows


def compare(trace_dir: Path, run_dir: Path, concurrency: int, model: str, hardware: str,
            step_overhead_ms: float | None = None, layer_efficiency: bool = False) -> dict:
    records = _records(run_dir)
    measured = _measured(records)
    with tempfile.TemporaryDirectory() as tmp:
        _sent_subset(trace_dir, records, Path(tmp))
        predicted = _predicted(Path(tmp), model, hardware, concurrency, step_overhead_ms,
                               layer_efficiency)
    keys = [k for k in measured if k in predicted]
    m, p = _stats([measured[k] for k in keys]), _stats([predicted[k] for k in keys])
    error = {k: (p[k] - m[k]) / m[k] for k in m if k != "requests" and m[k] and p[k] is not None}
    return {"concurrency": concurrency, "step_overhead_ms": step_overhead_ms,
            "layer_efficiency": layer_efficiency,
            "sent": len(records), "compared": len(keys),
            "measured": m, "predicted": p, "relative_error": error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--runs", nargs="+", required=True, help="CONCURRENCY=RUN_DIR")
    ap.add_argument("--model", default="Qwen/Qwen3-8B")
    ap.add_argument("--hardware", default="h200-measured")
    ap.add_argument("--step-overhead-ms", type=float, default=None,
                    help="replace the cost model's per-step overhead (an engine property)")
    ap.add_argument("--layer-efficiency", action="store_true",
                    help="scale the ceilings by the profile's measured per-layer efficiency")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows = []
    for spec in a.runs:
        c, run_dir = spec.split("=", 1)
        rows.append(compare(a.trace, Path(run_dir), int(c), a.model, a.hardware,
                            a.step_overhead_ms, a.layer_efficiency))
        r = rows[-1]
        print(f"c={c}: " + ", ".join(
            f"{k} {r['measured'][k]:.1f} vs {r['predicted'][k]:.1f} ({v:+.0%})"
            for k, v in r["relative_error"].items()))
    a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
