"""The simulator in closed-loop lanes (what `simulate-jobs` and `capacity` run), under two
versions of the code side by side: the vllm profile against the sglang profile, and the
summary's cost as the run grows (issue 38 item 2).

    PYTHONPATH=src python benchmarks/simulate_lanes_speed.py --base BASE_SRC [--pairs 5]

BASE_SRC is another checkout's `src` (`git archive BASE src | tar -x -C /tmp/b`: /tmp/b/src).
Workload: the 100 Claude Code sessions of tests/data/traces/claude-code (each played once),
Qwen3-8B on the H200 with the simulator's GPU pool and 16 lanes; `--scale K` replays them K
times over (fresh namespaces) for the summary's growth. Each pair runs every case in a fresh
process under each version, in turn (which goes first alternates), so a loaded machine slows
both alike. Timed in CPU seconds: the run (`run_sessions`), and apart from it the summary
(`summarize` of the same requests). Printed: per case the median requests per CPU second of
each version, the vllm / sglang ratio, and the summary's CPU at 8x over 1x."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "traces" / "claude-code"
CASES = [("sglang", 0, 1), ("sglang", 1, 1), ("vllm", 0, 1), ("vllm", 1, 1),
         ("sglang", 0, 8), ("vllm", 0, 8)]
HOST_TOKENS = 1_000_000


def worker(profile: str, host: int, scale: int) -> None:
    import kvbench.sim.simulate as sim
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.sim.engine_profile import load_engine_profile
    from kvbench.sim.simulate import SimSetup, run_sessions
    from kvbench.sim.sizing import gpu_tier_tokens, resolve_costs
    from kvbench.workload import load_trace
    from kvbench.workload.bounds import WorkloadBounds
    from kvbench.workload.session import Session

    base = load_trace([TRACE])
    sessions = [Session(f"{s.session_id}#{k}", s.turns, f"{s.namespace}#{k}", s.source, s.meta)
                for k in range(scale) for s in base]
    p = load_engine_profile(profile)
    costs = resolve_costs("qwen3-8b", "h200", 1, engine=profile)
    engine = EngineConfig(kv_manager=p.kv_manager, block_tokens=int(p.block_tokens.value))
    setup = SimSetup(gpu_tier_tokens(costs, "h200"), HOST_TOKENS if host else 0, engine=engine)
    # the summary's share of the run: `summarize` timed where run_sessions calls it
    spent = [0.0]
    original = sim.summarize

    def summarize(*a, **kw):
        c0 = time.process_time()
        try:
            return original(*a, **kw)
        finally:
            spent[0] += time.process_time() - c0

    sim.summarize = summarize
    done: list = []
    cpu0 = time.process_time()
    summary = run_sessions(sessions, costs, setup, WorkloadBounds(concurrency=16),
                           requests=done)
    cpu_s = time.process_time() - cpu0
    print(json.dumps({"requests": len(done), "cpu_s": cpu_s, "summary_cpu_s": spent[0],
                      "hit": summary["hit_rate"]["total"]}))


def timed(src: str, case: tuple) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    argv = [sys.executable, __file__, "--worker", *map(str, case)]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the base version's src folder")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--worker", nargs=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.worker:
        profile, host, scale = args.worker
        worker(profile, int(host), int(scale))
        return
    versions = {"base": args.base, "new": str(ROOT / "src")}
    runs: dict = {(v, c): [] for v in versions for c in CASES}
    for i in range(args.pairs):
        order = list(versions.items()) if i % 2 == 0 else list(versions.items())[::-1]
        for case in CASES:
            for name, src in order:
                runs[(name, case)].append(timed(src, case))
    rows = []
    for case in CASES:
        row = {"profile": case[0], "host": bool(case[1]), "scale": case[2]}
        for name in versions:
            r = runs[(name, case)]
            row[name] = {"requests": r[0]["requests"],
                         "req_per_cpu_s": statistics.median(x["requests"] / x["cpu_s"]
                                                            for x in r),
                         "summary_cpu_s": statistics.median(x["summary_cpu_s"] for x in r),
                         "hit": r[0]["hit"]}
        rows.append(row)
    by = {(r["profile"], r["host"], r["scale"]): r for r in rows}
    print("| profile | host tier | scale | requests | base req/CPU-s | new req/CPU-s | new/base |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        b, n = r["base"]["req_per_cpu_s"], r["new"]["req_per_cpu_s"]
        print(f"| {r['profile']} | {'yes' if r['host'] else 'no'} | {r['scale']} | "
              f"{r['new']['requests']:,} | {b:,.0f} | {n:,.0f} | {n / b:.2f}x |")
    print()
    for name in versions:
        for host in (False, True):
            s, v = by[("sglang", host, 1)][name], by[("vllm", host, 1)][name]
            print(f"{name}: vllm / sglang time per request, host tier {'yes' if host else 'no'}: "
                  f"{s['req_per_cpu_s'] / v['req_per_cpu_s']:.2f}x")
        for profile in ("sglang", "vllm"):
            one, eight = by[(profile, False, 1)][name], by[(profile, False, 8)][name]
            print(f"{name}: {profile} summary CPU at 8x / 1x: "
                  f"{eight['summary_cpu_s'] / one['summary_cpu_s']:.1f}x "
                  f"({one['summary_cpu_s']:.3f} -> {eight['summary_cpu_s']:.3f} s; requests "
                  f"{eight['requests'] / one['requests']:.1f}x)")
    if args.out:
        from kvbench.files import write_json_atomic

        write_json_atomic(args.out, rows)


if __name__ == "__main__":
    main()
