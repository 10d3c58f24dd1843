"""The `vllm` profile's `load_stall_s`: what it stands for, measured in the real vLLM 0.26 H200
runs' token timestamps, and its value, fitted on the fit half of their sessions only.

1. Stalls (measured, nothing simulated): for each host hit (cached >= half its prompt) that
   arrived while only decoding requests were in flight (none prefilling, none arriving before
   its first token), the token stream of one of them between the hit's send and its first
   token. Gaps longer than the stream's median + 3 ms are grouped into stalls (a stall ends
   after 2.5 normal gaps without one); each stall's excess is its gaps minus that many normal
   gaps. A hit shows two: one when it reaches the engine (its load runs meanwhile) and one
   ~80-90 ms later, after the load, before its first token (the excess there includes the
   hit's own prefill step beyond a normal one).
2. Fit: every run simulated (benchmarks/gpu/validate_sim.py's setting) at each candidate
   value; per request, ln(simulated / real TTFT) over the requests both sent, in the offload
   runs of both workloads (`runs`, `runs-s15`), per half (benchmarks/gpu/heldout.py
   half_of). The fit takes the value whose fit-half median is nearest 0 (unbiased per
   request); the held-out half is printed beside it, never used.

    PYTHONPATH=src python benchmarks/gpu/vllm/load_stall.py [--values 0 0.02 ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import math
import statistics
from pathlib import Path

from kvbench.files import iter_jsonl

GPU = Path(__file__).resolve().parents[1]
RUNS = GPU.parents[0] / "results" / "h200" / "vllm" / "runs"
# the fit reads the fit half of both workloads' runs: the committed runs (recorded think
# times) and session 15's (the stream's gaps, runs-s15)
FIT_RUNS = (RUNS, RUNS.with_name("runs-s15"))
# runs taken after the value was fitted (session 22, 2026-12-06: runs-s15 at conc 6): they
# test it and never move it, so the fit stays the one the profile ships (`runs` has runs of
# the same names, of the first workload, in the fit)
LATER = frozenset(RUNS.with_name("runs-s15") / f"qwen3-8b_tp1_conc6_{arm}" for arm in (
    "kvdram-vllm-native", "kvdram-vllm-native__r1", "kvdram-vllm-native__r2",
    "kvdram-vllm-simple__r1", "kvnone__r1", "kvnone__r2"))
VALUES = (0.0, 0.01, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.055, 0.06)


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stalls(run: Path) -> list[dict]:
    """The stalls of a decoding neighbour's stream around each such host hit of `run`."""
    recs = [r for r in iter_jsonl(run / "records.jsonl") if r["status"] == "ok"]
    out = []
    for r in recs:
        cached, s, f = r["cached_tokens"] or 0, r["t_send_ns"], r["t_first_ns"]
        if cached < r["prompt_tokens"] / 2:
            continue
        others = [o for o in recs if o is not r and o["t_send_ns"] <= f and o["t_last_ns"] >= s]
        # within 5 ms of the send: a request just admitted or about to be
        if not others or any(o["t_first_ns"] > s - 5e6 or o["t_last_ns"] < f + 5e6
                             for o in others):
            continue
        ts = [t for t in others[0]["chunk_ns"] if s - 1e6 <= t <= f + 1e6]
        gaps = [((a - s) / 1e6, (b - a) / 1e6) for a, b in itertools.pairwise(ts)]
        if len(gaps) < 3:
            continue
        normal = statistics.median(g for _, g in gaps)
        groups: list[list[tuple[float, float]]] = []
        for t, g in gaps:
            if g <= normal + 3:
                continue
            if groups and t - sum(groups[-1][-1]) < 2.5 * normal:
                groups[-1].append((t, g))
            else:
                groups.append([(t, g)])
        out.append({"run": run.name, "session": r["session_id"], "turn": r["turn"],
                    "prompt": r["prompt_tokens"], "cached": cached, "ttft_ms": (f - s) / 1e6,
                    "normal_ms": normal,
                    "stalls": [(grp[0][0], sum(g - normal for _, g in grp)) for grp in groups]})
    return out


def log_errors_by_arm(validate, runs: list[dict], half_of) -> dict[tuple, list[float]]:
    """(arm, conc, half) -> ln(simulated / real TTFT) per request both sent, for the real runs
    `runs` (validate_sim._real), each setting simulated once with the current profile and the
    sessions the run sent (validate_sim.sessions_for)."""
    sims: dict[tuple, dict] = {}
    out: dict[tuple, list[float]] = {}
    for real in runs:
        key = validate.setting(real)
        if key not in sims:
            sims[key] = validate._simulated(validate.sessions_for(real), real, "h200-measured")
        sim = sims[key]["ttft_by_request"]
        for k, a in real["ttft_by_request"].items():
            if k in sim and a > 0 and sim[k] > 0:
                out.setdefault((real["arm"], real["conc"], half_of(k[0])), []).append(
                    math.log(sim[k] / a))
    return out


def per_request_log_errors(values: list[float], arms: tuple[str, ...] = ("vllm-native",
                                                                        "vllm-simple"),
                           ) -> dict[float, dict[str, list[float]]]:
    """value -> half -> ln(simulated / real TTFT) per request of the offload runs (of `arms`:
    both connectors unless told)."""
    validate, heldout = _module("validate_sim"), _module("heldout")
    runs = [r for r in (validate._real(p) for d in FIT_RUNS for p in sorted(d.iterdir())
                        if (p / "result.json").is_file() and p not in LATER)
            if r["arm"] in arms]
    resolve = validate.resolve_costs
    out: dict[float, dict[str, list[float]]] = {}
    try:
        for value in values:
            validate.resolve_costs = lambda *a, _v=value, **k: dataclasses.replace(
                resolve(*a, **k), load_stall_s=_v)
            halves: dict[str, list[float]] = {h: [] for h in heldout.HALVES}
            for (_, _, half), x in log_errors_by_arm(validate, runs,
                                                     heldout.half_of).items():
                halves[half].extend(x)
            out[value] = halves
    finally:
        validate.resolve_costs = resolve
    return out


def fitted(errors: dict[float, dict[str, list[float]]]) -> float:
    """The value whose fit-half median ln(simulated / real TTFT) is nearest 0; the held-out
    half is not looked at."""
    return min(errors, key=lambda v: abs(statistics.median(errors[v]["fit"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=float, nargs="+", default=list(VALUES))
    args = ap.parse_args()
    half_of = _module("heldout").half_of
    print("1. stalls of a decoding neighbour around each host hit (start ms after the hit's "
          "send: excess ms)")
    rows = [row for run in sorted(RUNS.iterdir()) if "kvdram" in run.name
            for row in stalls(run)]
    for row in rows:
        cells = "  ".join(f"{t:4.0f}: {e:4.0f}" for t, e in row["stalls"])
        print(f"  {half_of(row['session']):8s} {row['run']:45s} {row['session']} t{row['turn']:<2d}"
              f" prompt {row['prompt']:6,d} cached {row['cached']:6,d} TTFT {row['ttft_ms']:4.0f}"
              f" normal {row['normal_ms']:.1f}  {cells}")
    for half in ("fit", "held-out"):
        two = [r["stalls"] for r in rows if half_of(r["session"]) == half and len(r["stalls"]) >= 2]
        if two:
            print(f"  {half}: {len(two)} hits with two stalls; excess median first "
                  f"{statistics.median(s[0][1] for s in two):.0f} ms, last "
                  f"{statistics.median(s[-1][1] for s in two):.0f} ms, the last starting "
                  f"{statistics.median(s[-1][0] - s[0][0] for s in two):.0f} ms after the first")
    print("\n2. ln(simulated / real TTFT) per request of the offload runs, by half")
    errors = per_request_log_errors(args.values)
    for value, halves in errors.items():
        cells = []
        for half, x in halves.items():
            cells.append(f"{half} n {len(x)} median {statistics.median(x):+.4f} "
                         f"mean |ln| {statistics.fmean(abs(y) for y in x):.4f}")
        print(f"  load_stall_s {value:.3f}: " + "   ".join(cells))
    print(f"\nfit (the fit half's median nearest 0): load_stall_s = {fitted(errors)}")


if __name__ == "__main__":
    main()
