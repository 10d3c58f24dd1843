"""Fit an engine profile's host overheads from the probe of a real server (probe.py's JSON),
never from the replay the profile is later compared against.

The probe ran fixed-length prompts (4 requests of 32 output tokens each) at concurrency 1
and 4. With short prompts (128 and 1,024 tokens) the GPU work is a few milliseconds, so what
the client sees is the engine's host work: with the cost model's GPU body (this engine's
attention mode and layer efficiency, zero overheads) subtracted,

    TPOT at 1 = step + per_sequence          TPOT at 4 = step + 4 x per_sequence
    TTFT at 1 = step + per_sequence + prefill

each solved per prompt length and averaged. Then the attention efficiency: with those
overheads, the fraction of the effective FLOP/s at which the attention FLOPs must run for the
simulated TTFT of the longest prompt at concurrency 1 (32,768 tokens, where attention is a
third of the work) to equal the measured one. The other long-prompt points (8,192 at 1 and
4, 32,768 at 4) are in no fit; the script replays every probe point through the simulator to
show how the fitted profile does on them.

A host cost per prompt token measured apart (`--prompt-token-overhead-s`: the API server's
tokenization, benchmarks/gpu/vllm/tokenize_cost.py) is taken out of each TTFT before the fit,
so the prefill overhead and the attention efficiency no longer carry it; it is charged on every
prompt token then, cached or not, where the compute terms are charged on computed tokens only.

    PYTHONPATH=src python benchmarks/gpu/fit_engine_profile.py \\
        benchmarks/results/h200/calibrate/probe.json --engine transformers
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

from kvbench.sim import SimSetup, Trace, TraceRequest, run
from kvbench.sim.sizing import resolve_costs

FIT_PROMPTS = (128, 1024)
ATTENTION_PROMPT = 32768


def _body_costs(model: str, hardware: str, engine: str, prompt_token_overhead_s: float = 0.0):
    """The engine's costing with no fitted overheads and attention at the dense layers' rate;
    the per-prompt-token cost is the one given (measured apart), not the profile's."""
    costs = resolve_costs(model, hardware, 1, engine=engine)
    raw = resolve_costs(model, hardware, 1).attention_flops_per_token_per_context_token_per_rank
    return replace(costs, step_overhead_s=0.0, prefill_overhead_s=0.0,
                   per_sequence_overhead_s=0.0, prompt_token_overhead_s=prompt_token_overhead_s,
                   attention_flops_per_token_per_context_token_per_rank=raw)


def fit(probe: list[dict], model: str = "Qwen/Qwen3-8B", hardware: str = "h200-measured",
        engine: str = "transformers", fit_prompts: tuple[int, ...] = FIT_PROMPTS,
        attention_prompt: int = ATTENTION_PROMPT,
        prompt_token_overhead_s: float = 0.0,
        decode_point: tuple[int, int] | None = None) -> dict[str, float]:
    """step_overhead_s, per_sequence_overhead_s, prefill_overhead_s (seconds) and
    attention_efficiency (a fraction), with prompt_token_overhead_s (s per prompt token)
    given; with `decode_point` (prompt tokens, concurrency), also decode_kv_read_efficiency
    from that probe point's TPOT."""
    body = _body_costs(model, hardware, engine, prompt_token_overhead_s)
    point = {(p["prompt_tokens"], p["concurrency"]): p for p in probe}
    steps, per_seq, prefill = [], [], []
    for n in fit_prompts:
        one, four = point[(n, 1)], point[(n, 4)]
        ctx = one["server_prompt_tokens_p50"] + 16  # mid-way through 32 output tokens
        t1 = one["tpot_ms_p50"] / 1e3 - body.decode_step_s(1, ctx)
        t4 = four["tpot_ms_p50"] / 1e3 - body.decode_step_s(4, 4 * ctx)
        s = (t4 - t1) / 3
        steps.append(t1 - s)
        per_seq.append(s)
        prompt = int(one["server_prompt_tokens_p50"])
        p = (one["ttft_ms_p50"] / 1e3 - body.step_s([(prompt, 0)], 0, 0)
             - prompt_token_overhead_s * prompt)
        prefill.append(p - t1)
    overheads = {"step_overhead_s": statistics.fmean(steps),
                 "per_sequence_overhead_s": statistics.fmean(per_seq),
                 "prefill_overhead_s": statistics.fmean(prefill)}
    costs = replace(body, **overheads)
    long = [point[(attention_prompt, 1)]]
    with_attention = replay_probe(long, costs)[0]["ttft_ms"]["predicted"]
    without = replay_probe(long, replace(
        costs, attention_flops_per_token_per_context_token_per_rank=0.0))[0]["ttft_ms"]
    attention_ms = with_attention - without["predicted"]
    missing_ms = long[0]["ttft_ms_p50"] - with_attention
    out = {**overheads, "attention_efficiency": attention_ms / (attention_ms + missing_ms),
           "prompt_token_overhead_s": prompt_token_overhead_s}
    if decode_point is not None:
        out["decode_kv_read_efficiency"] = _decode_kv_read_efficiency(
            point[decode_point], decode_point[1], costs)
    return out


def _decode_kv_read_efficiency(p: dict, batch: int, costs) -> float:
    """The fraction of the HBM rate at which decode reads the KV for the TPOT measured at a
    long prompt: TPOT = overhead + weights / HBM + KV x batch x context / (HBM x eff), the
    memory arm (a decode step of a few sequences is never compute-bound)."""
    ctx = batch * (p["server_prompt_tokens_p50"] + 16)
    a_mem, b_mem, _, _ = costs.decode_lines(batch)
    kv_s = p["tpot_ms_p50"] / 1e3 - costs.decode_overhead_s(batch) - a_mem
    return min(1.0, b_mem * ctx / kv_s) if kv_s > 0 else 1.0


def fitted_costs(fitted: dict[str, float], model: str = "Qwen/Qwen3-8B",
                 hardware: str = "h200-measured", engine: str = "transformers"):
    """The engine's cost model with the fitted numbers in place of the profile's."""
    body = _body_costs(model, hardware, engine, fitted.get("prompt_token_overhead_s", 0.0))
    return replace(body, **{k: v for k, v in fitted.items() if k != "attention_efficiency"},
                   attention_flops_per_token_per_context_token_per_rank=(
                       body.attention_flops_per_token_per_context_token_per_rank
                       / fitted["attention_efficiency"]))


def replay_probe(probe: list[dict], costs, fit_prompts: tuple[int, ...] = FIT_PROMPTS,
                 attention_prompt: int = ATTENTION_PROMPT) -> list[dict]:
    """Each probe point through the simulator: distinct random prompts (no prefix reuse),
    `requests` requests of 32 output tokens, closed loop at the point's concurrency."""
    rows = []
    for i, p in enumerate(probe):
        n, c = int(p["server_prompt_tokens_p50"]), p["concurrency"]
        out = p["records"][0]["completion_tokens"] if p.get("records") else 32
        page = 64
        sessions = [[TraceRequest(0.0, 0.0, n, out,
                                  [(i << 32) + (r << 20) + k for k in range(math.ceil(n / page))],
                                  page)] for r in range(p["requests"])]
        done: list = []
        run([Trace(f"probe-{n}-c{c}", page, sessions)], costs, SimSetup(math.inf, concurrency=c),
            requests=done)
        # medians as probe.py takes them (the mean of the middle two of four)
        ttft = statistics.median((r.first_s - r.arrival_s) * 1e3 for r in done)
        tpot = statistics.median((r.finish_s - r.first_s) * 1e3 / (r.output_tokens - 1)
                                 for r in done)
        rows.append({"prompt_tokens": p["prompt_tokens"], "concurrency": c,
                     "ttft_ms": {"measured": p["ttft_ms_p50"], "predicted": ttft},
                     "tpot_ms": {"measured": p["tpot_ms_p50"], "predicted": tpot},
                     "fit_point": p["prompt_tokens"] in fit_prompts or (
                         p["prompt_tokens"] == attention_prompt and c == 1)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", type=Path)
    ap.add_argument("--model", default="Qwen/Qwen3-8B")
    ap.add_argument("--hardware", default="h200-measured")
    ap.add_argument("--engine", default="transformers",
                    help="engine profile whose attention mode and efficiency the fit assumes")
    ap.add_argument("--out", type=Path, help="write the fit and the probe replay as JSON")
    ap.add_argument("--fit-prompts", type=int, nargs="+", default=list(FIT_PROMPTS),
                    help="short prompt lengths of the overhead fit (probe points at conc 1, 4)")
    ap.add_argument("--attention-prompt", type=int, default=ATTENTION_PROMPT,
                    help="the long prompt (conc 1) that fits the attention efficiency")
    ap.add_argument("--prompt-token-overhead-s", type=float, default=0.0,
                    help="host seconds per prompt token measured apart (tokenization), "
                    "taken out of the TTFTs before the fit")
    ap.add_argument("--decode-point", type=int, nargs=2, metavar=("PROMPT", "CONC"),
                    help="a long-prompt probe point whose TPOT fits decode_kv_read_efficiency")
    a = ap.parse_args()
    probe = json.loads(a.probe.read_text())
    fitted = fit(probe, a.model, a.hardware, a.engine, tuple(a.fit_prompts),
                 a.attention_prompt, a.prompt_token_overhead_s,
                 tuple(a.decode_point) if a.decode_point else None)
    print("fitted (overheads in s):", {k: float(f"{v:.4g}") for k, v in fitted.items()})
    rows = replay_probe(probe, fitted_costs(fitted, a.model, a.hardware, a.engine),
                        tuple(a.fit_prompts), a.attention_prompt)
    print("prompt conc  TTFT meas  pred   TPOT meas  pred  (ms; * = fit point)")
    for r in rows:
        print(f"{r['prompt_tokens']:6d} {r['concurrency']:4d} {r['ttft_ms']['measured']:9.0f} "
              f"{r['ttft_ms']['predicted']:6.0f} {r['tpot_ms']['measured']:9.1f} "
              f"{r['tpot_ms']['predicted']:6.1f} {'*' if r['fit_point'] else ''}")
    if a.out:
        a.out.write_text(json.dumps({"fitted": fitted, "probe_replay": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
