"""Issue 37 item 5: an SGLang 0.5.17 H200 engine profile for the scaled Qwen3.5 (6 GDN + 2
full-attention layers, MoE, one MTP layer; triton attention, no CUDA graphs, EAGLE 3 steps /
4 draft tokens) fitted on the FIT SET only: session 9's six jobs (`results/.../runs/`). The
held-out jobs (`runs-agentx/`, session 11) are read by sim_error.py, never here. No probe of
this server exists (the GPU budget ran out), so the fit reads what the replays logged.

Decode (the server's `Decode batch` lines, logged every 40 decode steps, srt/managers/
scheduler_components/metrics_reporter.py:727-738 in sglang 0.5.17, decode_log_interval=40 in
server.log): a line's step time is accept_len x running / gen_throughput (tokens of the last
40 steps over their wall time). A
line counts only where no `Prefill batch` line came between it and the line before and the
running count is the same in both, so its 40 steps were decode steps of that batch size. The
cost model's decode body for the line (weights and experts for 4 verified tokens per sequence,
its logged `#full token` context, the 10% draft share of `with_speculation`) is subtracted,
and what is left is fitted as step_overhead_s + per_sequence_overhead_s x running (least
squares, both >= 0). The MTP acceptance is the mean of every decode line's `accept len`.

Prefill (the fit set's lone requests, `benchmarks/gpu/vllm/lone_requests.py`: no other
request in flight between send and first token): TTFT less the cost model's GPU body (dense
and MoE FLOPs or the weight read, per 8,192-token chunk as the server chunks,
`chunked_prefill_size=8192` in server.log) is fitted, non-negative least squares, as
c_chunk x chunks + c_pair x attention pairs (sum of n x context + n(n+1)/2 per chunk) +
c_prompt x prompt tokens (cached ones too). Then prefill_overhead_s = c_chunk - step_overhead_s
- per_sequence_overhead_s (a prefill step pays all three), attention_efficiency = the cost
model's raw attention seconds per pair / c_pair, prompt_token_overhead_s = c_prompt (host work
per prompt token before the scheduler: tokenization and the like; the simulator runs it on one
tokenizer thread while this server had 6 tokenizer workers, so queuing behind it is overstated
at concurrency 8). The logged `Prefill batch` lines give no usable chunk times: their `input
throughput` divides by the gap since the previous prefill line, which holds up to 39 unlogged
decode steps whenever a request is decoding (the gaps spread 29 to 890 ms for 8,192 tokens).

Host loads of HiCache hits are not separable: a 20K-token hit is 123 MB of KV (1.9 ms at the
H2D rate) plus one GDN state, under the fit's residual noise (RMS printed); the profile keeps
the hardware's H2D rate. The per-prompt-token term and the per-chunk term are partly
interchangeable on 22 points (printed: the fit's residuals per request).

    PYTHONPATH=src python benchmarks/gpu/qwen3.5/fit_profile.py \\
        --out benchmarks/results/h200/qwen3.5/engine-fit-qwen3.5.json \\
        > benchmarks/results/h200/qwen3.5/engine-fit-qwen3.5.txt
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FIT_RUNS = ROOT / "benchmarks/results/h200/qwen3.5/runs"
FIT_JOBS = ("resident-c4", "hicache-c4", "unpatched-c4", "resident-c8", "hicache-c8-a",
            "hicache-c8-b")
MODEL = "kvbench/qwen3.5-397b-a17b-scaled"
HARDWARE = "h200-measured"
CHUNK_TOKENS = 8192  # server.log: chunked_prefill_size=8192
VERIFY_TOKENS = 4  # --speculative-num-draft-tokens 4
DECODE = re.compile(r"Decode batch, #running-req: (\d+), #full token: (\d+), .*accept len: "
                    r"([\d.]+), .*gen throughput \(token/s\): ([\d.]+)")


def _import(path: Path, name: str):
    """A sibling benchmark script as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


fee = _import(ROOT / "benchmarks/gpu/fit_engine_profile.py", "fit_engine_profile")
lone = _import(ROOT / "benchmarks/gpu/vllm/lone_requests.py", "lone_requests")


def decode_lines(log: Path) -> list[dict]:
    """The clean decode lines of one server.log: 40 decode steps at one batch size."""
    out, clean, prev_running = [], False, None
    for line in log.read_text(errors="replace").splitlines():
        if "Prefill batch" in line:
            clean = False
            continue
        m = DECODE.search(line)
        if not m:
            continue
        running, context, accept, gen = int(m[1]), int(m[2]), float(m[3]), float(m[4])
        if clean and running == prev_running and gen > 0:
            out.append({"running": running, "context_tokens": context, "accept_len": accept,
                        "step_s": accept * running / gen})
        clean, prev_running = True, running
    return out


def accept_lens(log: Path) -> list[float]:
    return [float(m[3]) for m in map(DECODE.search, log.read_text(errors="replace")
                                     .splitlines()) if m]


def chunks(prompt: int, cached: int) -> list[tuple[int, int]]:
    """(new tokens, context) per prefill chunk of a request."""
    out, left, ctx = [], prompt - cached, cached
    while left > 0:
        n = min(CHUNK_TOKENS, left)
        out.append((n, ctx))
        left, ctx = left - n, ctx + n
    return out


def body_costs(accept: float):
    """The cost model with no engine overheads and attention at zero (fitted apart), with
    this server's speculation."""
    body = fee._body_costs(MODEL, HARDWARE, "sglang")
    return body.with_speculation(accept, VERIFY_TOKENS)


def fit(runs: Path = FIT_RUNS, jobs: tuple[str, ...] = FIT_JOBS) -> dict:
    logs = [runs / j / "server.log" for j in jobs]
    accept = statistics.fmean(a for log in logs for a in accept_lens(log))
    body = body_costs(accept)
    raw_pair_s = body.attention_flops_per_token_per_context_token_per_rank / body.flops_per_s
    no_attention = replace(body, attention_flops_per_token_per_context_token_per_rank=0.0)
    # decode
    lines = [dict(d, job=log.parent.name) for log in logs for d in decode_lines(log)]
    a = np.array([[1.0, d["running"]] for d in lines])
    # the body's overheads are zero (fit_engine_profile._body_costs)
    y = np.array([d["step_s"] - body.decode_step_s(d["running"], d["context_tokens"])
                  for d in lines])
    (step_s, per_seq_s), _ = nnls(a, y)
    # prefill
    reqs = []
    for job in jobs:
        for r in lone.lone_requests(runs / job):
            cs = chunks(r["prompt_tokens"], r["cached_tokens"])
            gpu_s = sum(no_attention.step_s([c], 0, 0) for c in cs)
            pairs = sum(n * ctx + n * (n + 1) / 2 for n, ctx in cs)
            reqs.append({"job": job, "session_id": r["session_id"], "turn": r["turn"],
                         "prompt_tokens": r["prompt_tokens"],
                         "cached_tokens": r["cached_tokens"], "chunks": len(cs),
                         "pairs": pairs, "gpu_body_s": gpu_s,
                         "ttft_s": (r["t_first_ns"] - r["t_send_ns"]) / 1e9})
    a = np.array([[q["chunks"], q["pairs"], q["prompt_tokens"]] for q in reqs])
    y = np.array([q["ttft_s"] - q["gpu_body_s"] for q in reqs])
    (chunk_s, pair_s, prompt_s), _ = nnls(a, y)
    for q, fitted in zip(reqs, a @ np.array([chunk_s, pair_s, prompt_s]), strict=True):
        q["modelled_s"] = q["gpu_body_s"] + float(fitted)
    fitted = {
        "step_overhead_s": float(step_s), "per_sequence_overhead_s": float(per_seq_s),
        "prefill_overhead_s": max(0.0, float(chunk_s - step_s - per_seq_s)),
        "attention_efficiency": min(1.0, raw_pair_s / pair_s) if pair_s > 0 else 1.0,
        "prompt_token_overhead_s": float(prompt_s), "accept_length": accept,
    }
    dec_res = [d["step_s"] - (step_s + per_seq_s * d["running"]
                              + body.decode_step_s(d["running"], d["context_tokens"]))
               for d in lines]
    return {"fitted": fitted, "decode_lines": lines, "lone_requests": reqs,
            "fit_jobs": list(jobs), "accept_lines": sum(len(accept_lens(g)) for g in logs),
            "residual_rms_ms": {
                "decode_step": 1e3 * math.sqrt(statistics.fmean(r * r for r in dec_res)),
                "ttft": 1e3 * math.sqrt(statistics.fmean(
                    (q["modelled_s"] - q["ttft_s"]) ** 2 for q in reqs))}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=FIT_RUNS)
    ap.add_argument("--out", type=Path, help="write the fit, its points and residuals (JSON)")
    a = ap.parse_args()
    doc = fit(a.runs)
    f = doc["fitted"]
    print(f"fit set: {', '.join(doc['fit_jobs'])}")
    print("fitted:", {k: float(f"{v:.4g}") for k, v in f.items()})
    print(f"MTP accept length {f['accept_length']:.3f} (mean of {doc['accept_lines']} decode "
          "lines)")
    by: dict[int, list[float]] = {}
    for d in doc["decode_lines"]:
        by.setdefault(d["running"], []).append(d["step_s"] * 1e3)
    for b, v in sorted(by.items()):
        print(f"decode steps at batch {b}: {len(v)} lines, median {statistics.median(v):.1f} "
              f"ms (range {min(v):.1f}-{max(v):.1f})")
    print(f"residual RMS: decode step {doc['residual_rms_ms']['decode_step']:.1f} ms, "
          f"TTFT {doc['residual_rms_ms']['ttft']:.1f} ms")
    print("lone request                              prompt cached chunks  TTFT ms  modelled")
    for q in doc["lone_requests"]:
        print(f"{q['job']:<14} {q['session_id']} turn {q['turn']:<3} {q['prompt_tokens']:7,d} "
              f"{q['cached_tokens']:7,d} {q['chunks']:5d} {q['ttft_s'] * 1e3:8.0f} "
              f"{q['modelled_s'] * 1e3:9.0f}")
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
