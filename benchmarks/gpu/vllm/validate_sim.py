"""The simulator's `vllm` engine profile against the real vLLM 0.26 H200 runs: the same
workload bounds as the runs (run.sh: the 42 bounded sessions, conc 4 / 12, 50 s, outputs capped
at 256), the same GPU KV cap (2,730 blocks of 16 = 43,680 tokens, --kv-cache-memory-bytes) and
the host KV tokens of each run's plan, `kvbench simulate`'s closed-loop lanes (run_sessions).
Nothing is fitted from these runs: the profile's numbers are its YAML's.

Per job: hit rate by tier (real: vllm:prompt_tokens_by_source_total over prompt tokens;
simulated: first-scheduling hits by tier), TTFT p50/p90, ITL p50, input and output tok/s, the
requests each sent, and the overlap of the (session, turn) sets; then the offload/resident
ratios of TTFT p50 and output tok/s at each concurrency.

    PYTHONPATH=src python benchmarks/gpu/vllm/validate_sim.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from kvbench.files import iter_jsonl
from kvbench.sim.engine import EngineConfig
from kvbench.sim.engine_profile import load_engine_profile
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.sim.sizing import resolve_costs
from kvbench.workload import load_trace
from kvbench.workload.bounds import WorkloadBounds

HERE = Path(__file__).resolve().parent
RUNS = HERE.parents[1] / "results" / "h200" / "vllm" / "runs"
GPU_KV_TOKENS = 2730 * 16  # vLLM's log: 2,730 blocks under --kv-cache-memory-bytes 6 GiB
DURATION_S, MAX_TOKENS_CAP = 50.0, 256  # run.sh
CHUNK_TOKENS = 8192  # server.log: max_num_batched_tokens=8192


def _real(run: Path) -> dict:
    r = json.loads((run / "result.json").read_text())
    m, s = r["request_metrics"], r["server_metrics"]
    prompt = s["tokens"]["prompt_total"]
    tiers = s["cache"]["cached_tokens_by_tier"]
    recs = list(iter_jsonl(run / "records.jsonl"))
    backend = r["kv_offload_backend"]
    arm = (backend.get("name") if isinstance(backend, dict) else backend) or "resident"
    return {"conc": r["conc"], "arm": arm,
            "host_tokens": r["plan"]["host-kv-tokens"] if r["kv_offload_backend"] else 0,
            "requests": m["latency"]["ttft_ms"]["n"],
            "hit_device": (tiers["device"] or 0) / prompt,
            "hit_host": (tiers["external"] or 0) / prompt,
            "ttft_p50_ms": m["latency"]["ttft_ms"]["p50"],
            "ttft_p90_ms": m["latency"]["ttft_ms"]["p90"],
            "itl_p50_ms": m["latency"]["itl_ms"]["p50"],
            "tpot_p50_ms": m["latency"]["tpot_ms"]["p50"],
            "input_tok_s": m["throughput"]["input_tok_s"],
            "output_tok_s": m["throughput"]["output_tok_s"],
            "sent": {(x["session_id"], x["turn"]) for x in recs if not x["is_warmup"]},
            "ttft_by_request": {(x["session_id"], x["turn"]): (x["t_first_ns"] - x["t_send_ns"])
                                / 1e6 for x in recs
                                if x["status"] == "ok" and not x["is_warmup"]}}


def _simulated(sessions, conc: int, host_tokens: int, hardware: str,
               engine_profile: str = "vllm", done: list | None = None) -> dict:
    profile = load_engine_profile(engine_profile)
    costs = resolve_costs("qwen3-8b", hardware, 1, "bf16", engine=profile)
    engine = EngineConfig(chunked_prefill_tokens=CHUNK_TOKENS, kv_manager=profile.kv_manager,
                          block_tokens=16)
    done = [] if done is None else done
    s = run_sessions(sessions, costs, SimSetup(GPU_KV_TOKENS, host_tokens, engine=engine),
                     WorkloadBounds(concurrency=conc, duration_s=DURATION_S,
                                    max_tokens_cap=MAX_TOKENS_CAP), requests=done)
    return {"requests": s["requests"], "hit_device": s["hit_rate"]["device"],
            "hit_host": s["hit_rate"]["host"], "ttft_p50_ms": s["ttft_ms"]["p50"],
            "ttft_p90_ms": s["ttft_ms"]["p90"], "itl_p50_ms": s["itl_ms"]["p50"],
            "tpot_p50_ms": s["tpot_ms"]["p50"],
            "input_tok_s": s["throughput"]["input_tok_s"],
            "output_tok_s": s["throughput"]["output_tok_s"],
            "preemptions": s["cache"]["preemptions"],
            "sent": {(r.meta["session_id"], r.meta["turn"]) for r in done
                     if not r.meta.get("is_warmup")},
            "ttft_by_request": {(r.meta["session_id"], r.meta["turn"]): r.ttft_s * 1e3
                                for r in done if r.first_s >= 0 and not r.meta.get("is_warmup")}}


def request_error(real: dict, sim: dict) -> float:
    """Mean |ln(simulated / real)| of TTFT over the requests both sent: per request, where a
    percentile of ~40 requests can hide errors that cancel (or hit one unlucky request)."""
    a, b = real["ttft_by_request"], sim["ttft_by_request"]
    both = [k for k in a.keys() & b.keys() if a[k] > 0 and b[k] > 0]
    return statistics.fmean(abs(math.log(b[k] / a[k])) for k in both) if both else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--hardware", default="h200-measured", help="the profile the fit used")
    ap.add_argument("--engine-profile", default="vllm", help="name or YAML path")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sessions = load_trace([HERE / "traces"])
    rows = []
    for run in sorted(p for p in args.runs.iterdir() if (p / "result.json").is_file()):
        real = _real(run)
        sim = _simulated(sessions, real["conc"], real["host_tokens"], args.hardware,
                         args.engine_profile)
        error = request_error(real, sim)
        a, b = real.pop("sent"), sim.pop("sent")
        real.pop("ttft_by_request"), sim.pop("ttft_by_request")
        rows.append({"job": run.name, "conc": real["conc"], "arm": real["arm"], "real": real,
                     "sim": sim, "same_requests": len(a & b), "union_requests": len(a | b),
                     "ttft_request_error": error})
    keys = ("requests", "hit_device", "hit_host", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms",
            "tpot_p50_ms", "input_tok_s", "output_tok_s")
    print(f"{'job':<40}" + "".join(f"{k:>26}" for k in keys) + f"{'same / union':>14}"
          + f"{'TTFT |ln| per request':>23}")
    for r in rows:
        cells = []
        for k in keys:
            a, b = r["real"][k], r["sim"][k]
            if k.startswith("hit"):
                cells.append(f"{a:.3f} / {b:.3f} ({(b - a) * 100:+.1f} pt)")
            else:
                cells.append(f"{a:,.1f} / {b:,.1f} ({(b / a - 1) * 100:+.0f}%)")
        print(f"{r['job']:<40}" + "".join(f"{c:>26}" for c in cells)
              + f"{r['same_requests']:>7} / {r['union_requests']}"
              + f"{r['ttft_request_error']:>23.3f}")
    print("\noffload / resident (real -> simulated; real resident: the mean of its repeats):")
    for conc in sorted({r["conc"] for r in rows}):
        base = [r for r in rows if r["conc"] == conc and r["arm"] == "resident"]
        if not base:
            continue
        for r in rows:
            if r["conc"] != conc or r["arm"] == "resident":
                continue
            for k in ("ttft_p50_ms", "output_tok_s"):
                measured = r["real"][k] / (sum(b["real"][k] for b in base) / len(base))
                predicted = r["sim"][k] / base[0]["sim"][k]  # the simulation is deterministic
                r.setdefault("ratio_to_resident", {})[k] = {
                    "real": measured, "sim": predicted, "resident_repeats": len(base)}
                print(f"  conc {conc} {r['arm']:<12} {k:<13} {measured:.3f} -> {predicted:.3f}"
                      f"  (resident n={len(base)})")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
