"""The simulator's engine profiles against the real H200 runs of vLLM 0.26 and SGLang 0.5.17:
the same workload bounds as the runs (the 42 bounded sessions of benchmarks/gpu/vllm/traces,
50 s, outputs capped at 256), the same GPU KV cap as each server logged, the host KV tokens and
HiCache write policy of each run's plan, and `kvbench simulate`'s closed-loop lanes
(run_sessions). Nothing is fitted from these runs: each profile's numbers are its YAML's (vLLM:
the `vllm` profile; SGLang: the probe fit, results/h200/sglang/engine-sglang-h200-triton.yaml).

Per job: hit rate by tier (real: the engine's tier counters over prompt tokens; simulated:
first-scheduling hits by tier), TTFT p50/p90, ITL p50, input and output tok/s, the requests
each sent, and the overlap of the (session, turn) sets; the 95% bootstrap interval of the real
TTFT p50 over the run's requests and whether the simulated p50 falls inside it; then the
offload/resident ratios of TTFT p50 and output tok/s at each concurrency.

    PYTHONPATH=src python benchmarks/gpu/validate_sim.py [--runs DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
from pathlib import Path
from typing import NamedTuple

from kvbench.files import iter_jsonl
from kvbench.sim.engine import EngineConfig
from kvbench.sim.engine_profile import load_engine_profile
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.sim.sizing import resolve_costs
from kvbench.workload import load_trace
from kvbench.workload.bounds import WorkloadBounds

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[0] / "results" / "h200"
RUNS = RESULTS / "vllm" / "runs"
TRACES = HERE / "vllm" / "traces"
MAX_TOKENS_CAP = 256  # vllm/run.sh, sglang/run.sh (their --duration is each run's result.json)
CHUNK_TOKENS = 8192  # both servers' logs: max_num_batched_tokens / chunked_prefill_size 8192


class Served(NamedTuple):  # (a dataclass needs sys.modules, which the tests' loading skips)
    """How the engine's H200 server held its KV cache, from its own log."""

    gpu_kv_tokens: int
    block_tokens: int
    profile: str  # the engine profile the simulator runs (name or YAML path)


SERVED = {
    # vLLM's log: 2,730 blocks of 16 under --kv-cache-memory-bytes 6 GiB
    "vllm": Served(2730 * 16, 16, "vllm"),
    # SGLang's server.log: max_total_num_tokens=43648 (--max-total-tokens 43680 rounded down
    # to whole 64-token pages), --page-size 64
    "sglang": Served(43_648, 64, str(RESULTS / "sglang" / "engine-sglang-h200-triton.yaml")),
}


def _arm(r: dict) -> str:
    """resident, or the offload backend (vLLM's connector; SGLang's HiCache write policy)."""
    backend = r["kv_offload_backend"]
    if not isinstance(backend, dict):
        return backend or "resident"
    return backend.get("write-policy") or backend.get("name")


def p50_interval(values: list[float], resamples: int = 4000, seed: int = 0) -> list[float]:
    """The 95% bootstrap interval of the median of `values` (one run's requests, resampled
    with replacement): how far a run's TTFT p50 could move by which requests the 50 s bound
    let in. A simulated p50 inside it is a miss the run itself cannot tell from noise."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).choice(x, size=(resamples, x.size))
    lo, hi = np.percentile(np.percentile(draws, 50, axis=1), [2.5, 97.5])
    return [float(lo), float(hi)]


def _real(run: Path) -> dict:
    r = json.loads((run / "result.json").read_text())
    m, s = r["request_metrics"], r["server_metrics"]
    prompt = s["tokens"]["prompt_total"]
    tiers = s["cache"]["cached_tokens_by_tier"]
    recs = list(iter_jsonl(run / "records.jsonl"))
    backend = r["kv_offload_backend"]
    ttft = {(x["session_id"], x["turn"]): (x["t_first_ns"] - x["t_send_ns"]) / 1e6
            for x in recs if x["status"] == "ok" and not x["is_warmup"]}
    return {"job": run.name, "conc": r["conc"], "arm": _arm(r), "engine": r["framework"],
            "duration_s": r["duration_s"],
            # the validity profile the replay ran under (None: the committed runs', before
            # profiles; agentx-v1: session 14's, runs-agentx-v1)
            "profile": (r.get("workload") or {}).get("profile"),
            # the content digest of the sessions it replayed (workload/identity.py); None in
            # runs written before kvbench recorded it (sessions 2-8)
            "corpus": ((r.get("workload") or {}).get("corpus") or {}).get("fingerprint"),
            "write_policy": (backend or {}).get("write-policy") or "write_through",
            "host_tokens": r["plan"]["host-kv-tokens"] if backend else 0,
            "requests": m["latency"]["ttft_ms"]["n"],
            "hit_device": (tiers["device"] or 0) / prompt,
            # vLLM counts a CPU-tier hit as an external KV transfer, SGLang as host
            "hit_host": ((tiers["host"] or 0) + (tiers["external"] or 0)) / prompt,
            "ttft_p50_ms": m["latency"]["ttft_ms"]["p50"],
            "ttft_p50_interval_ms": p50_interval(list(ttft.values())),
            "ttft_p90_ms": m["latency"]["ttft_ms"]["p90"],
            "itl_p50_ms": m["latency"]["itl_ms"]["p50"],
            "tpot_p50_ms": m["latency"]["tpot_ms"]["p50"],
            "input_tok_s": m["throughput"]["input_tok_s"],
            "output_tok_s": m["throughput"]["output_tok_s"],
            "sent": {(x["session_id"], x["turn"]) for x in recs if not x["is_warmup"]},
            "ttft_by_request": ttft}


def setting(real: dict) -> tuple:
    """What a simulation of the run depends on (the simulation is deterministic)."""
    return (real["engine"], real["conc"], real["duration_s"], real["host_tokens"],
            real["write_policy"], real["profile"], real["corpus"])


def bounds_of(real: dict) -> WorkloadBounds:
    """The run's workload bounds: its concurrency and duration (50 s but in runs-s23), outputs
    capped at 256, and where it ran under a validity profile that profile's replay settings
    (replay/profile.py
    `replay_settings`, as `kvbench run` applies them: the harness's warm-up, starts sampled in
    the trace, its seed, no cap on one delay, the per-tree cache-bust marker)."""
    if real["profile"] is None:
        return WorkloadBounds(concurrency=real["conc"], duration_s=real["duration_s"],
                              max_tokens_cap=MAX_TOKENS_CAP)
    from kvbench.replay.profile import chat_prompts, profile_named, replay_settings

    st = replay_settings(profile_named(real["profile"]), real["conc"],
                         {"duration_s": real["duration_s"]})
    return WorkloadBounds(
        concurrency=real["conc"], duration_s=real["duration_s"], max_tokens_cap=MAX_TOKENS_CAP,
        think_time_cap_s=st["think_time_cap_s"], start=st["start"],
        start_ratio=st["start_ratio"], seed=st["seed"], warmup_per_lane=st["warmup_per_lane"],
        tree_idle_cap_s=st["tree_idle_cap_s"], system_idle_cap_s=st["system_idle_cap_s"],
        tree_markers=chat_prompts(real["profile"], chat=True)[1])


def _simulated(sessions, real: dict, hardware: str, engine_profile: str | None = None,
               done: list | None = None) -> dict:
    served = SERVED[real["engine"]]
    profile = load_engine_profile(engine_profile or served.profile)
    costs = resolve_costs("qwen3-8b", hardware, 1, "bf16", engine=profile)
    engine = EngineConfig(chunked_prefill_tokens=CHUNK_TOKENS, kv_manager=profile.kv_manager,
                          block_tokens=served.block_tokens)
    done = [] if done is None else done
    s = run_sessions(sessions, costs, SimSetup(served.gpu_kv_tokens, real["host_tokens"],
                                               write_policy=real["write_policy"], engine=engine),
                     bounds_of(real), requests=done)
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


def request_ratio_p50(real: dict, sim: dict) -> float:
    """Median of simulated / real TTFT over the requests both sent: the bias per request,
    apart from which requests each side's percentiles are taken over."""
    a, b = real["ttft_by_request"], sim["ttft_by_request"]
    both = [b[k] / a[k] for k in a.keys() & b.keys() if a[k] > 0]
    return statistics.median(both) if both else math.nan


def request_error(real: dict, sim: dict) -> float:
    """Mean |ln(simulated / real)| of TTFT over the requests both sent: per request, where a
    percentile of ~40 requests can hide errors that cancel (or hit one unlucky request)."""
    a, b = real["ttft_by_request"], sim["ttft_by_request"]
    both = [k for k in a.keys() & b.keys() if a[k] > 0 and b[k] > 0]
    return statistics.fmean(abs(math.log(b[k] / a[k])) for k in both) if both else math.nan


def sessions_as_sent(traces: Path = TRACES) -> list:
    """The committed runs' sessions as those runs sent them: kvbench up to session 8 slept each
    request's recorded `think_time`; since the AgentX workload (workload/weka.py) a gap is the
    stream's end-to-start time from the recorded `t` and `api_time` where a trace has both,
    as agentx-harness 1.0.12 does. These traces have both, and the two differ (trace_0011's
    third turn: 3.0 s recorded, 14.1 s end to start), so a simulation of the old runs must
    sleep what they slept."""
    import dataclasses
    import gzip

    sessions = load_trace([traces])
    recorded = {}
    for path in sorted(traces.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        recorded[str(doc["id"])] = [float(r.get("think_time") or 0.0) for r in doc["requests"]]
    out = []
    for s in sessions:
        gaps = recorded[s.session_id]
        assert len(gaps) == len(s.turns), s.session_id  # no subagents in these traces
        out.append(dataclasses.replace(s, turns=[
            dataclasses.replace(t, think_time_s=g) for t, g in zip(s.turns, gaps, strict=True)]))
    return out


def sessions_for(real: dict) -> list:
    """The sessions as the run sent them, by the digest it recorded: the traces as kvbench
    loads them now, or as the committed runs sent them (recorded think times). A run that
    recorded no digest (sessions 2-8) sent the latter; one whose digest is neither is refused:
    a simulation of other sessions than it sent would be compared with it."""
    if real["corpus"] is None:
        return _sessions(True)
    for as_sent in (False, True):
        if _digest(as_sent) == real["corpus"]:
            return _sessions(as_sent)
    raise ValueError(f"{real['job']}: replayed sessions of digest {real['corpus'][:16]}..., "
                     "neither the traces as loaded nor as the committed runs sent them")


@functools.cache
def _sessions(as_sent: bool) -> list:
    return sessions_as_sent() if as_sent else load_trace([TRACES])


@functools.cache
def _digest(as_sent: bool) -> str:
    from kvbench.workload.identity import fingerprint

    return fingerprint(_sessions(as_sent))


def evaluate(runs: Path = RUNS, hardware: str = "h200-measured",
             engine_profile: str | None = None) -> list[dict]:
    """One row per run: the measurement, its simulation (one per setting: deterministic), the
    per-request TTFT error and the overlap of the requests both sent."""
    rows, sims = [], {}
    for run in sorted(p for p in runs.iterdir() if (p / "result.json").is_file()):
        real = _real(run)
        if setting(real) not in sims:
            sims[setting(real)] = _simulated(sessions_for(real), real, hardware,
                                             engine_profile)
        sim = dict(sims[setting(real)])
        error, ratio = request_error(real, sim), request_ratio_p50(real, sim)
        a, b = real.pop("sent"), sim.pop("sent")
        real.pop("ttft_by_request"), sim.pop("ttft_by_request")
        lo, hi = real["ttft_p50_interval_ms"]
        rows.append({"job": run.name, "conc": real["conc"], "arm": real["arm"], "real": real,
                     "sim": sim, "same_requests": len(a & b), "union_requests": len(a | b),
                     "ttft_request_error": error, "ttft_request_ratio_p50": ratio,
                     "sim_ttft_p50_in_interval": lo <= sim["ttft_p50_ms"] <= hi})
    return rows


GROUP_KEYS = ("hit_device", "hit_host", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms",
              "input_tok_s", "output_tok_s")


def by_arm(rows: list[dict]) -> dict[tuple[int, str], tuple[dict, dict]]:
    """(conc, arm) -> (the mean of the real repeats per metric, the simulation)."""
    by: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["conc"], r["arm"]), []).append(r)
    return {k: ({m: statistics.fmean(r["real"][m] for r in runs) for m in GROUP_KEYS},
                runs[0]["sim"]) for k, runs in by.items()}


def _interval_cell(r: dict) -> str:
    lo, hi = r["real"]["ttft_p50_interval_ms"]
    return f"[{lo:,.0f}, {hi:,.0f}] sim {'in' if r['sim_ttft_p50_in_interval'] else 'OUT'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--hardware", default="h200-measured", help="the profile the fit used")
    ap.add_argument("--engine-profile", help="name or YAML path (default: the engine's, "
                    "SERVED)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = evaluate(args.runs, args.hardware, args.engine_profile)
    keys = ("requests", "hit_device", "hit_host", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms",
            "tpot_p50_ms", "input_tok_s", "output_tok_s")
    print(f"{'job':<40}" + "".join(f"{k:>26}" for k in keys) + f"{'same / union':>14}"
          + f"{'TTFT |ln| per request':>23}{'TTFT sim/real p50':>19}"
          + f"{'real TTFT p50 95% interval':>28}")
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
              + f"{r['ttft_request_error']:>23.3f}{r['ttft_request_ratio_p50']:>19.2f}"
              + f"{_interval_cell(r):>28}")
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
