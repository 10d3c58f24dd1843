"""How fast `kvbench simulate` replays the Mooncake conversation trace (12,031 requests).

Side by side on the same configuration (the `kvbench simulate` defaults: the built-in
reference-8b model on an H200, a GPU tier sized from HBM, open loop at trace times, plus an
offload arm with a host tier):
- `event`: the simulator as shipped: decode advances in one jump between events;
- `step` (baseline): the same engine stepping decode one forward pass at a time, the naive
  way (it is also what the streaming server does).
Both must produce the same cache hits; the script checks that. Run:

    PYTHONPATH=src python benchmarks/simulate_speed.py [--repeat 3] [--cpu 0] \
        [--engine-profile transformers]

Prints requests per second of wall time and of CPU time (trace loading excluded; it is
printed apart). `--cpu N` pins the process to one core. The issue's bar is >= 20,000
requests per second of wall time on one core for the event-driven run. To compare two
versions of the code on a loaded machine, `simulate_speed_ab.py` runs this configuration
(`setups`) under both, alternately, and prints CPU-time medians side by side."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from kvbench.sim.engine import EngineConfig
from kvbench.sim.engine_profile import load_engine_profile
from kvbench.sim.simulate import SimSetup, run
from kvbench.sim.sizing import gpu_tier_tokens, resolve_costs
from kvbench.sim.trace import load_traces

TRACE = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "mooncake"
         / "conversation_trace.jsonl.gz")


def measure(traces, costs, setup: SimSetup) -> tuple[float, float, dict]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = run(traces, costs, setup)
    return time.perf_counter() - wall0, time.process_time() - cpu0, summary


def setups(engine_profile: str, fast_forward: bool = True):
    """(costs, gpu tier tokens, {arm: SimSetup}) of this benchmark for an engine profile:
    the `resident` arm without a host tier, the `offload` arm with one of 4x the GPU tier."""
    costs = resolve_costs("reference-8b", "h200", engine=engine_profile)
    profile = load_engine_profile(engine_profile)
    gpu = gpu_tier_tokens(costs, "h200")
    engine = EngineConfig(fast_forward=fast_forward, kv_manager=profile.kv_manager,
                          block_tokens=int(profile.block_tokens.value))
    return costs, gpu, {arm: SimSetup(gpu, host, engine=engine)
                        for arm, host in (("resident", 0), ("offload", 4 * gpu))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--engine-profile", default="sglang",
                        help="sglang | vllm | transformers (packed attention, overheads)")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})

    t0 = time.perf_counter()
    traces = load_traces([args.trace])
    n = sum(t.num_requests for t in traces)
    print(f"trace: {args.trace.name}, {n:,} requests, loaded in {time.perf_counter() - t0:.2f} s")
    costs, gpu, arms = setups(args.engine_profile)
    stepped = setups(args.engine_profile, fast_forward=False)[2]
    kv_manager = arms["resident"].engine.kv_manager
    print(f"cost model: {costs.label}, {costs.engine} engine ({kv_manager} KV manager); "
          f"gpu tier {gpu:,} tokens; "
          f"offload host tier {4 * gpu:,}")
    print(f"{'arm':<10}{'mode':<7}{'wall s':>9}{'cpu s':>9}{'req/s wall':>13}{'req/s cpu':>12}"
          f"{'hit rate':>10}")
    for arm in arms:
        hits = {}
        medians = {}
        for mode, ff in (("event", True), ("step", False)):
            setup = (arms if ff else stepped)[arm]
            runs = [measure(traces, costs, setup)
                    for _ in range(args.repeat if ff else max(1, args.repeat // 3))]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            summary = runs[0][2]
            hits[mode] = summary["cached_tokens"]
            medians[mode] = wall
            print(f"{arm:<10}{mode:<7}{wall:>9.3f}{cpu:>9.3f}{n / wall:>13,.0f}{n / cpu:>12,.0f}"
                  f"{summary['hit_rate']['total']:>10.1%}")
        if kv_manager == "radix":
            assert hits["event"] == hits["step"], hits
        else:  # vLLM's scheduling reacts to step times, which the closed form sums in a
            # different floating-point order: a few blocks' worth may differ
            diff = abs(hits["event"]["total"] - hits["step"]["total"])
            assert diff <= 1e-3 * max(1, hits["step"]["total"]), hits
        print(f"{arm:<10}speed-up of event over step (wall): "
              f"{medians['step'] / medians['event']:.1f}x")


if __name__ == "__main__":
    main()
