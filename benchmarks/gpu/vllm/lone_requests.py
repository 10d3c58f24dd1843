"""The requests of the real vLLM 0.26 H200 runs that had the server to themselves (no other
request in flight between their send and their first token), against the cost model alone:
the engine profile's tokenization of the whole prompt, the host hit's load at the profile's
H2D rate, `load_ready_steps` step starts and what of `load_stall_s` outlasts the step before,
then the rest of the prompt in chunks of 8,192.
The hit is the real one (records.jsonl cached_tokens); nothing is fitted.

    PYTHONPATH=src python benchmarks/gpu/vllm/lone_requests.py [--engine-profile vllm]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from kvbench.files import iter_jsonl, jsonl_path
from kvbench.sim.engine_profile import load_engine_profile
from kvbench.sim.sizing import resolve_costs

RUNS = Path(__file__).resolve().parents[2] / "results" / "h200" / "vllm" / "runs"
CHUNK_TOKENS = 8192  # server.log: max_num_batched_tokens=8192


def modelled_ttft_s(costs, prompt: int, cached: int) -> float:
    """An unqueued request's TTFT as the cost model has it."""
    t = costs.prompt_token_overhead_s * prompt
    if cached:
        t += costs.load_s(cached) + max(costs.load_ready_steps, 0) * costs.step_overhead_s
        # resuming it: host work behind the connector-only step before (sim/vllm.py)
        t += max(0.0, costs.load_stall_s - costs.step_overhead_s)
    left, ctx = prompt - cached, cached
    while left > 0:
        n = min(CHUNK_TOKENS, left)
        t += costs.step_s([(n, ctx)], 0, 0)
        left, ctx = left - n, ctx + n
    return t


def lone_requests(run: Path) -> list[dict]:
    recs = list(iter_jsonl(run / "records.jsonl"))
    recs = [r for r in recs if r["status"] == "ok"]
    return [r for r in recs if not any(
        o is not r and o["t_send_ns"] < r["t_first_ns"] and o["t_last_ns"] > r["t_send_ns"]
        for o in recs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--engine-profile", default="vllm", help="name or YAML path")
    a = ap.parse_args()
    costs = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16",
                          engine=load_engine_profile(a.engine_profile))
    gaps: dict[bool, list[float]] = {False: [], True: []}
    for run in sorted(p for p in a.runs.iterdir() if jsonl_path(p / "records.jsonl")):
        for r in lone_requests(run):
            real = (r["t_first_ns"] - r["t_send_ns"]) / 1e6
            model = modelled_ttft_s(costs, r["prompt_tokens"], r["cached_tokens"]) * 1e3
            gaps[bool(r["cached_tokens"])].append(real - model)
            print(f"{run.name:<44} {r['session_id']} turn {r['turn']:<2} prompt "
                  f"{r['prompt_tokens']:6,d} cached {r['cached_tokens']:6,d}  real {real:6.0f} ms"
                  f"  modelled {model:6.0f} ms  real - modelled {real - model:+5.0f}")
    for hit, g in gaps.items():
        if g:
            print(f"{'host hits' if hit else 'full prefills'}: {len(g)}, real - modelled "
                  f"{min(g):+.0f} .. {max(g):+.0f} ms, median {statistics.median(g):+.0f}")


if __name__ == "__main__":
    main()
