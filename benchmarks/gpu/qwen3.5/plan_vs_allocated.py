"""Issue 37 item 3: each pool SGLang allocated (its server log) beside kvbench's plan of the
same job (plan.json), with the difference; and the scheduler's RSS growth over a resident run
against the projected host footprint (the host-memory sampler, benchmarks/gpu/vllm/memory.py).
A vLLM job (plan.json framework vllm; ../qwen3.5-vllm/run.sh) is read with vLLM 0.26's log
lines (kvbench.results.allocation.vllm_allocation) and its EngineCore's RSS, and prints the
layout facts vLLM logs that the plan holds no field for (CPU tensors, draft groups).

    python benchmarks/gpu/qwen3.5/plan_vs_allocated.py JOB_DIR... \
        [--memory STEP/memory.jsonl.gz --resident-memory RESIDENT_STEP/memory.jsonl.gz]

JOB_DIR: a `kvbench run` job directory (plan.json, server.log) or a `kvbench launch`
work directory. Rows whose |difference| exceeds --tolerance (default 2%, beyond the log's own
rounding) are marked `!`; the exit status is 1 when any is."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from kvbench.results.allocation import (
    SCHEDULER_COMM,
    VLLM_ENGINE_COMM,
    engine_allocation,
    format_rows,
    plan_vs_allocated,
    rss_growth_row,
    vllm_allocation,
)


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs", nargs="+", type=Path)
    ap.add_argument("--memory", type=Path, help="the offload job's host-memory samples")
    ap.add_argument("--resident-memory", type=Path, help="a resident job's samples")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--plan-file", default="plan.json",
                    help="the plan to compare (plan.orig.json: the run's own, before a replan)")
    args = ap.parse_args(argv)
    off = False
    for job in args.jobs:
        plan_path, log_path = job / args.plan_file, job / "server.log"
        if not plan_path.is_file() or not log_path.is_file():
            print(f"{job}: no {args.plan_file} or server.log", file=sys.stderr)
            off = True
            continue
        plan = json.loads(plan_path.read_text())
        vllm = plan.get("framework") == "vllm"
        log = log_path.read_text(errors="replace")
        alloc = vllm_allocation(log) if vllm else engine_allocation(log)
        rows = plan_vs_allocated(plan, alloc)
        if args.memory and args.resident_memory:
            rss = rss_growth_row(plan, _jsonl(args.memory), _jsonl(args.resident_memory),
                                 VLLM_ENGINE_COMM if vllm else SCHEDULER_COMM)
            if rss is not None:
                rows.append(rss)
        print(f"== {job} ({plan.get('config-key')}, {plan.get('exp-name')})")
        if vllm:
            print(f"   vLLM logged: max concurrency {alloc.max_concurrency} at "
                  f"{alloc.max_model_len} tokens, CPU tensors {alloc.cpu_tensors}, CPU blocks "
                  f"{alloc.cpu_blocks}, draft groups {alloc.draft_groups}; plan page "
                  f"{plan.get('page-size-tokens')} tokens")
        for line, row in zip(format_rows(rows), [None, *rows], strict=True):
            flag = row is not None and not row.pool.endswith(" RSS") and \
                row.within > args.tolerance
            off |= flag
            print(("! " if flag else "  ") + line)
    return 1 if off else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
