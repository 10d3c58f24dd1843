"""`simulate_speed.py`'s event-driven runs under two versions of the code, side by side.

    PYTHONPATH=src python benchmarks/simulate_speed_ab.py --base BASE_SRC [--pairs 9] \
        [--engine-profile vllm] [--cpu 1] [--trace PATH]

BASE_SRC is another checkout's `src` folder (e.g. `git archive BASE src | tar -x -C /tmp/b`,
then `/tmp/b/src`); "new" is the `kvbench` this script imports. Each pair runs, per arm
(resident, offload), one `run()` of the Mooncake trace in a fresh process under each
version, the two in turn (which goes first alternates from pair to pair), so that a loaded
machine slows both alike. Timed: CPU seconds of the `run()` (trace loading excluded).
Printed: per arm, the base and new medians and bests in requests per CPU second and
new/base; the two versions' hit tokens and completions must agree (checked)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from simulate_speed import TRACE, setups

from kvbench.sim.simulate import run
from kvbench.sim.trace import load_traces

ARMS = ("resident", "offload")


def worker(trace: Path, engine_profile: str, arm: str) -> None:
    """One timed run in this process; prints {"cpu_s", "requests", "cached"} as JSON."""
    traces = load_traces([trace])
    costs, _, arms = setups(engine_profile)
    cpu0 = time.process_time()
    summary = run(traces, costs, arms[arm])
    cpu_s = time.process_time() - cpu0
    print(json.dumps({"cpu_s": cpu_s, "requests": summary["requests"],
                      "cached": summary["cached_tokens"]}))


def timed(src: str, args: argparse.Namespace, arm: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    argv = [sys.executable, __file__, "--worker", arm, "--trace", str(args.trace),
            "--engine-profile", args.engine_profile]
    if args.cpu is not None:
        argv = ["taskset", "-c", str(args.cpu), *argv]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the base version's src folder (required)")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--cpu", type=int, default=None, help="pin both to this core")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--engine-profile", default="vllm")
    parser.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.trace, args.engine_profile, args.worker)
        return
    if not args.base:
        parser.error("--base is required")
    new_src = str(Path(__import__("kvbench").__file__).resolve().parents[1])
    versions = {"base": str(Path(args.base).resolve()), "new": new_src}
    cpu: dict[tuple[str, str], list[float]] = {(v, a): [] for v in versions for a in ARMS}
    requests = 0
    print(f"base {versions['base']}\nnew  {versions['new']}\nload average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for i in range(args.pairs):
        for arm in ARMS:
            order = list(versions) if i % 2 == 0 else list(reversed(versions))
            got = {v: timed(versions[v], args, arm) for v in order}
            if got["base"]["cached"] != got["new"]["cached"] or (
                    got["base"]["requests"] != got["new"]["requests"]):
                raise SystemExit(f"{arm}: the versions disagree: {got}")
            requests = got["new"]["requests"]
            for v in versions:
                cpu[(v, arm)].append(got[v]["cpu_s"])
        print(f"pair {i + 1}: " + ", ".join(
            f"{arm} {cpu[('base', arm)][-1]:.3f} / {cpu[('new', arm)][-1]:.3f} s"
            for arm in ARMS), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{requests:,} requests, {args.engine_profile} profile, {args.pairs} pairs; "
          "requests per CPU second, median (best)")
    print(f"{'arm':<10}{'base':>20}{'new':>20}{'new/base median (best)':>26}")
    for arm in ARMS:
        b, n = cpu[("base", arm)], cpu[("new", arm)]
        bm, nm = statistics.median(b), statistics.median(n)
        print(f"{arm:<10}{f'{requests / bm:,.0f} ({requests / min(b):,.0f})':>20}"
              f"{f'{requests / nm:,.0f} ({requests / min(n):,.0f})':>20}"
              f"{f'{bm / nm:.2f}x ({min(b) / min(n):.2f}x)':>26}")


if __name__ == "__main__":
    main()
