"""`kvbench simulate-jobs`: recipe rows through the simulator, resident vs offload, every
selected job (the per-job modelling is in cli/sim_jobs.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.selection import SelectionCommand, selected_jobs, with_selection
from kvbench.cli.sim import (
    DurationOpt,
    MaxRequestsOpt,
    MaxTokensCapOpt,
    ThinkCapOpt,
    _bounds,
    _policy,
)
from kvbench.errors import SimError
from kvbench.matrix.selection import Selection


def _progress(entries, total: int):
    """The entries as they complete, with a progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        yield from entries
        return
    from rich.progress import track

    yield from track(entries, total=total, description="simulating jobs", transient=True)


@app.command("simulate-jobs", cls=SelectionCommand)
@with_selection
def simulate_jobs(
    selection: Selection,
    trace: Annotated[list[Path], typer.Option(
        help="Trace file or directory (kv-cache-tester JSON, Mooncake JSONL); repeatable.")],
    max_jobs: Annotated[int | None, typer.Option(
        help="Simulate at most this many of the selected jobs (default: all; says so when "
             "it cuts).")] = None,
    write_policy: Annotated[str, typer.Option(
        help="write_through | write_through_selective | write_back")] = "write_through",
    output_format: Annotated[str, typer.Option("--format", help="json | table")] = "table",
    duration: DurationOpt = None,
    max_requests: MaxRequestsOpt = None,
    max_tokens_cap: MaxTokensCapOpt = None,
    think_time_cap: ThinkCapOpt = 60.0,
    workers: Annotated[int, typer.Option(
        help="Processes to spread the jobs over; 0 = one per available core.")] = 0,
    prune: Annotated[bool, typer.Option(
        "--prune", help="Print the CI matrix (github-matrix) of only the rows whose predicted "
        "offload benefit is within --noise or above --threshold.")] = False,
    noise: Annotated[float, typer.Option(help="--prune: |benefit| at most this.")] = 0.05,
    threshold: Annotated[float, typer.Option(help="--prune: benefit at least this.")] = 0.2,
    sizing: Annotated[str, typer.Option(
        "--sizing", help="Host pools: launcher (default: the InferenceX launcher's; a row "
        "whose size oversubscribes its budget is listed as refused) or budget (the planner's "
        "own).")] = "launcher",
) -> None:
    """Simulate recipe rows: each selected job's plan (GPU and host KV tokens per rank, model,
    GPU, tp, precision) runs the trace with its concurrency as session lanes, GPU-resident
    and with the planned host tier, side by side. DP-attention rows run one rank per
    attention group behind the job's router; multi-node rows run their prefill and decode
    workers; a row that cannot be modelled is listed with the reason."""
    from kvbench.cli import sim_jobs
    from kvbench.sim.table import print_jobs
    from kvbench.workload import load_trace

    if prune:
        from kvbench.cli.predict import predict_matrix

        predict_matrix(selection, trace=trace, noise=noise, threshold=threshold,
                       emit="github-matrix", output_format=output_format)
        return
    check_format(output_format, ("json", "table"), SimError)
    from kvbench.plan.launcher_sizing import check_mode

    check_mode(sizing)
    if workers < 0:
        raise SimError(f"--workers: {workers}; allowed: >= 0 (0 = one per core)")
    policy = _policy(write_policy)
    sessions = load_trace(trace)  # bad input fails here, once, before any worker starts
    _bounds(1, duration=duration, max_requests=max_requests, max_tokens_cap=max_tokens_cap,
            think_time_cap=think_time_cap)  # and bad bounds
    jobs = selected_jobs(selection, SimError)
    if max_jobs is not None and max_jobs < len(jobs):
        print(f"simulating {max_jobs} of the {len(jobs)} selected jobs (--max-jobs)",
              file=sys.stderr)
        jobs = jobs[:max_jobs]
    bounds = {"duration_s": duration, "max_requests": max_requests,
              "max_tokens_cap": max_tokens_cap, "think_time_cap_s": think_time_cap}
    out = sim_jobs.simulate_jobs(jobs, list(trace), bounds, policy,
                                 workers or sim_jobs.default_workers(), progress=_progress,
                                 sizing=sizing)
    if output_format == "json":
        print(json.dumps(out, indent=1))
    else:
        print_jobs(out)
    from kvbench.workload.working_set import pool_warnings

    for line in pool_warnings(sessions, [(e["exp-name"], e["conc"], e["gpu-kv-tokens"])
                                         for e in out if e.get("arms")
                                         and e.get("host-kv-tokens")]):
        print(line, file=sys.stderr)
