"""Predicted (kvbench simulate's engine) vs measured (kvbench replay records) for the same
requests: TTFT, TPOT, E2E and output throughput, with the relative error of each.

The simulator replays exactly the (session, turn) pairs the real run sent, in the same lane
order and closed loop, from the same derived trace files; metrics are compared over the
requests that completed in the real run. Only public kvbench.sim APIs (`run` with
`requests=`, `resolve_costs` with `engine=`).

    PYTHONPATH=src python benchmarks/gpu/compare_sim.py --trace DIR --runs C=RUN_DIR ... \\
        --model Qwen/Qwen3-8B --hardware h200-measured --engine-profile transformers \\
        --out compare.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
from pathlib import Path

from kvbench.files import iter_jsonl


def _records(run_dir: Path) -> list[dict]:
    return list(iter_jsonl(run_dir / "records.jsonl"))  # or records.jsonl.gz


def _sent_subset(trace_dir: Path, records: list[dict], out: Path) -> dict[str, int]:
    """Write each touched session cut after its last sent turn; return session -> turns."""
    last: dict[str, int] = {}
    for r in records:
        last[r["session_id"]] = max(last.get(r["session_id"], -1), r["turn"])
    for sid, turn in last.items():
        with gzip.open(trace_dir / f"{sid}.json.gz", "rt") as f:
            doc = json.load(f)
        # as the session-1 replays slept: the recorded think_time (the loader takes the
        # end-to-start gap from the recorded t where there is one, as agentx-harness does)
        doc["requests"] = [{k: v for k, v in r.items() if k != "t"}
                           for r in doc["requests"][: turn + 1]]
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
               engine: str) -> dict:
    from kvbench.sim import SimSetup, load_traces, run
    from kvbench.sim.sizing import gpu_tier_tokens, resolve_costs

    costs = resolve_costs(model, hardware, 1, engine=engine)
    traces = load_traces([subset_dir])
    # one session per kv-cache-tester file: a request's `session` indexes these names
    names = [t.name for t in traces for s in t.sessions if s]
    done: list = []
    run(traces, costs, SimSetup(gpu_tier_tokens(costs, hardware), concurrency=concurrency),
        requests=done)
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
            engine: str = "sglang") -> dict:
    records = _records(run_dir)
    measured = _measured(records)
    with tempfile.TemporaryDirectory() as tmp:
        _sent_subset(trace_dir, records, Path(tmp))
        predicted = _predicted(Path(tmp), model, hardware, concurrency, engine)
    keys = [k for k in measured if k in predicted]
    m, p = _stats([measured[k] for k in keys]), _stats([predicted[k] for k in keys])
    error = {k: (p[k] - m[k]) / m[k] for k in m if k != "requests" and m[k] and p[k] is not None}
    return {"concurrency": concurrency, "engine_profile": engine,
            "sent": len(records), "compared": len(keys),
            "measured": m, "predicted": p, "relative_error": error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--runs", nargs="+", required=True, help="CONCURRENCY=RUN_DIR")
    ap.add_argument("--model", default="Qwen/Qwen3-8B")
    ap.add_argument("--hardware", default="h200-measured")
    ap.add_argument("--engine-profile", default="sglang",
                    help="sglang | vllm | transformers or a YAML path (kvbench.sim.engines)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows = []
    for spec in a.runs:
        c, run_dir = spec.split("=", 1)
        rows.append(compare(a.trace, Path(run_dir), int(c), a.model, a.hardware,
                            a.engine_profile))
        r = rows[-1]
        print(f"c={c}: " + ", ".join(
            f"{k} {r['measured'][k]:.1f} vs {r['predicted'][k]:.1f} ({v:+.0%})"
            for k, v in r["relative_error"].items()))
    a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
