"""vLLM 0.26's two CPU connectors at conc 4 on the H200 runs, side by side by half
(benchmarks/gpu/heldout.py half_of; issue 36 item 2): is the held-out offload / resident TTFT
p50 miss of the SimpleCPUOffloadConnector arm (real 0.44, simulated 0.50, while the native arm
holds) a connector behaviour the simulator lacks (it models both connectors alike), or the
statistic?

1. Per run and half: the TTFT p50 and the two TTFTs around it. The requests fall in two
   clusters (unqueued host hits ~170-300 ms, queued or missed >= 450 ms); where the middle
   straddles the gap, one request changing cluster (or one more request inside the 50 s)
   moves the cell by hundreds of ms.
2. The same (session, turn) in a simple and a native run: median ln(simple / native TTFT),
   beside the native repeats' own spread; and, for host hits unqueued in both (< 400 ms), the
   difference in ms (the connectors launch loads differently: native on the engine thread at
   the step's start, offloading/worker.py:305-316; simple from a background thread after the
   forward is launched, simple_kv_offload/worker.py:198-202, copy_backend.py:26-69).
3. The simulator (shipped profile, one simulation per setting: both connectors alike) per
   request, ln(simulated / real TTFT), by connector and half: a connector term would be asked
   for by the fit half only if the two connectors' biases there differed.
4. The connector term that would be: `load_stall_s` fitted, by load_stall.py's rule, on the
   simple arm's fit-half requests alone.

    PYTHONPATH=src python benchmarks/gpu/vllm/connectors.py
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import statistics
from pathlib import Path

from kvbench.files import iter_jsonl
from kvbench.sim.engine_profile import load_engine_profile

GPU = Path(__file__).resolve().parents[1]
RUNS = GPU.parents[0] / "results" / "h200" / "vllm" / "runs"
ARMS = ("vllm-native", "vllm-simple")
STALLS = (0.03, 0.035, 0.04, 0.045, 0.05, 0.055, 0.06, 0.07)  # load_stall_s candidates, s
FAST_MS = 400.0  # below: a host hit that waited for nothing (the clusters' gap is 300-450 ms)


def _module(name: str):
    """A benchmark script by its path under benchmarks/gpu, without `.py`."""
    spec = importlib.util.spec_from_file_location(Path(name).name, GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ttfts(run: Path) -> dict[tuple[str, int], float]:
    return {(r["session_id"], r["turn"]): (r["t_first_ns"] - r["t_send_ns"]) / 1e6
            for r in iter_jsonl(run / "records.jsonl")
            if r["status"] == "ok" and not r["is_warmup"]}


def _runs(conc: int) -> dict[str, list[Path]]:
    """arm -> the runs of that arm at `conc` (the arm as the run's directory names it)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(RUNS.iterdir()):
        for arm in (*ARMS, "resident"):
            tag = "kvnone" if arm == "resident" else f"kvdram-{arm}"
            if f"_conc{conc}_{tag}" in p.name:
                out.setdefault(arm, []).append(p)
    return out


def _middle(x: list[float]) -> tuple[float, float]:
    """The two values around the median (the same value twice for an odd count)."""
    s = sorted(x)
    return s[(len(s) - 1) // 2], s[len(s) // 2]


def _matched(a: dict, b: dict, half: str, half_of) -> list[tuple[float, float]]:
    return [(a[k], b[k]) for k in a.keys() & b.keys() if half_of(k[0]) == half]


def evidence(conc: int = 4) -> dict:
    """Everything the module's docstring lists, as numbers (per half)."""
    heldout = _module("heldout")
    half_of = heldout.half_of
    runs = _runs(conc)
    ttft = {p.name: _ttfts(p) for ps in runs.values() for p in ps}
    out: dict = {"runs": [], "pairs": {}, "repeats": {}, "fast_ms": {}, "sim_bias": {}}
    for arm, ps in runs.items():
        for p in ps:
            for half in heldout.HALVES:
                x = [t for k, t in ttft[p.name].items() if half_of(k[0]) == half]
                out["runs"].append({"run": p.name, "arm": arm, "half": half, "n": len(x),
                                    "p50_ms": statistics.median(x), "middle_ms": _middle(x)})
    for half in heldout.HALVES:
        pairs = [m for a, b in itertools.product(runs["vllm-native"], runs["vllm-simple"])
                 for m in _matched(ttft[a.name], ttft[b.name], half, half_of)]
        out["pairs"][half] = statistics.median(math.log(s / n) for n, s in pairs)
        out["fast_ms"][half] = [s - n for n, s in pairs if n < FAST_MS and s < FAST_MS]
        reps = [m for a, b in itertools.combinations(runs["vllm-native"], 2)
                for m in _matched(ttft[a.name], ttft[b.name], half, half_of)]
        out["repeats"][half] = statistics.fmean(abs(math.log(b / a)) for a, b in reps)
    validate = _module("validate_sim")
    reals = [validate._real(p) for arm in ARMS for p in runs[arm]]
    errors = _module("vllm/load_stall").log_errors_by_arm(validate, reals, half_of)
    out["sim_bias"] = {(arm, half): x for (arm, _, half), x in errors.items()}
    out["settings_simulated"] = len({validate.setting(r) for r in reals})
    # what a simple-only load_stall_s would be, by load_stall.py's rule on the fit half
    stall = _module("vllm/load_stall")
    out["simple_stall"] = stall.per_request_log_errors(list(STALLS), arms=("vllm-simple",))
    out["simple_stall_fit"] = stall.fitted(out["simple_stall"])
    return out


def main() -> None:
    e = evidence()
    print("1. per run and half: TTFT p50 ms (the two TTFTs around the median)")
    for r in e["runs"]:
        lo, hi = r["middle_ms"]
        print(f"  {r['run'][17:]:34s} {r['half']:8s} n {r['n']:2d} p50 {r['p50_ms']:5.0f} "
              f"({lo:5.0f}, {hi:5.0f})")
    print("\n2. the same request, simple vs native (every pair of runs)")
    for half, med in e["pairs"].items():
        fast = e["fast_ms"][half]
        print(f"  {half:8s} median ln(simple / native) {med:+.3f} (native repeats' own mean "
              f"|ln| {e['repeats'][half]:.3f}); unqueued hits in both: n {len(fast)}, "
              f"simple - native median {statistics.median(fast):+.1f} ms")
    print(f"\n3. ln(simulated / real TTFT) per request ({e['settings_simulated']} simulations, one "
          "per setting; the connectors alike)")
    for (arm, half), x in sorted(e["sim_bias"].items()):
        print(f"  {arm:12s} {half:8s} n {len(x):3d} median {statistics.median(x):+.3f} "
              f"mean |ln| {statistics.fmean(abs(y) for y in x):.3f}")
    print("\n4. load_stall_s fitted on the simple arm's fit-half requests alone (load_stall.py's "
          "rule; the held-out half printed beside it, never used)")
    for value, halves in e["simple_stall"].items():
        print(f"  {value * 1e3:4.0f} ms: " + "   ".join(
            f"{h} median {statistics.median(x):+.4f} mean |ln| "
            f"{statistics.fmean(abs(y) for y in x):.4f}" for h, x in halves.items()))
    shipped = load_engine_profile("vllm").load_stall_s.value
    print(f"  simple-only fit: {e['simple_stall_fit'] * 1e3:.0f} ms (shipped, both connectors: "
          f"{shipped * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
