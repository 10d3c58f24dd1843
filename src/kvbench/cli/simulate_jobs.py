"""`kvbench simulate-jobs`: recipe rows through the simulator, resident vs offload, every
selected job (the per-job modelling is in capacity/jobs.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.selection import SelectionCommand, selected_jobs, with_selection
from kvbench.cli.sim import (
    DurationOpt,
    MaxRequestsOpt,
    MaxTokensCapOpt,
    SeedOpt,
    _policy,
)
from kvbench.cli.trace_option import TRACE_HELP
from kvbench.errors import SimError
from kvbench.matrix.selection import Selection

TraceOpt = Annotated[list[str] | None, typer.Option(help=TRACE_HELP + "; default: agentx.")]
SessionsOpt = Annotated[int | None, typer.Option(
    help="agentx: at least this many corpus sessions (default AgentX's 393, more when a row's "
    "lanes need them); synthetic: the sessions (default 64).")]


def workload_source(trace: list[str] | None, sessions: int | None, seed: int | None):
    """The `--trace` values as a WorkloadSource (bad input fails here, once)."""
    from kvbench.workload.choice import parse_trace

    source = parse_trace(trace, synthetic_sessions=sessions or 64, seed=seed or 0,
                         corpus_sessions=sessions)
    if source.kind == "traces":
        source.sessions_for()  # load and validate the files before any worker starts
    return source


SizingOpt = Annotated[str, typer.Option(
    "--sizing", help="Host pools: launcher (default: the InferenceX launcher's; a row whose size "
    "oversubscribes its budget is listed as refused) or budget (the planner's own).")]
BoundsOpt = Annotated[str, typer.Option(
    "--bounds", help="agentx: as an AgentX point (its 3600 s, 10 warm-up requests per lane, "
    "lanes starting at 25-75% of a session, idle gaps capped at 300 s; lanes recycle "
    "sessions); once: each session played once from its first turn.")]


def bounds_given(duration: float | None, max_requests: int | None, max_tokens_cap: int | None,
                 think_time_cap: float | None, seed: int | None, mode: str = "agentx",
                 **more) -> dict:
    """The WorkloadBounds fields the user set (`mode`'s fill the rest, capacity/jobs.py)."""
    from kvbench.capacity.jobs import row_bounds

    given = {"duration_s": duration, "max_requests": max_requests,
             "max_tokens_cap": max_tokens_cap, "think_time_cap_s": think_time_cap,
             "seed": seed, **more}
    row_bounds(1, given, mode)  # bad bounds fail here, once
    return given


def workload_line(source, given: dict, mode: str = "agentx") -> str:
    """What every row replays, and by which bounds, in one line (said on stderr)."""
    from kvbench.replay.profile import AGENTX_V1

    d = given.get("duration_s")
    what = ("the AgentX-shaped corpus sized to each row (at least "
            f"{source.corpus_sessions(1)} sessions, the row's context variant)"
            if source.kind == "corpus" else source.label())
    if mode == "once":
        cap = given.get("think_time_cap_s") or 60.0
        return (f"workload: {what}; each session once from its first turn (--bounds once), "
                f"idle gaps capped at {cap:g} s"
                + (f", at most {d:g} s a row" if d is not None else ""))
    if given.get("max_requests") is not None and d is None:
        span = f"{given['max_requests']} profiled requests a row (--max-requests)"
    elif d is not None and d != AGENTX_V1.default_duration_s:
        span = (f"{d:g} s a row (--duration; AgentX runs {AGENTX_V1.default_duration_s:g} s: "
                "a shorter run sees less of each session's growth)")
    else:
        span = f"{AGENTX_V1.default_duration_s:g} s a row (AgentX's duration)"
    lo, hi = AGENTX_V1.start_ratio
    return (f"workload: {what}; {span}, {AGENTX_V1.warmup_requests_per_lane} warm-up requests "
            f"per lane, lanes starting at {lo:.0%}-{hi:.0%} of a session, idle gaps capped at "
            f"{given.get('think_time_cap_s') or AGENTX_V1.tree_idle_cap_s:g} s")


class _Progress:
    """Entries as they complete, with a line on stderr every few seconds (a bar on a
    terminal): rows done, elapsed, the time left at the rate so far."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s

    def __call__(self, entries, total: int):
        import time

        if sys.stderr.isatty():
            from rich.progress import track

            yield from track(entries, total=total, description="simulating jobs",
                             transient=True)
            return
        t0 = last = time.perf_counter()
        for done, entry in enumerate(entries, 1):
            yield entry
            now = time.perf_counter()
            if now - last >= self.every_s or done == total:
                last = now
                left = (now - t0) / done * (total - done)
                print(f"simulate-jobs: {done}/{total} rows, {now - t0:.0f} s"
                      + (f", ~{left:.0f} s left" if done < total else ""),
                      file=sys.stderr, flush=True)


def print_warnings(entries: list[dict]) -> None:
    from kvbench.workload.working_set import first_and_count

    for kind, what in (("lanes", "with more lanes than sessions"),
                       ("pool", "whose GPU pool the workload never fills")):
        lines = [e["warnings"][kind] for e in entries if (e.get("warnings") or {}).get(kind)]
        for line in first_and_count(lines, what):
            print(line, file=sys.stderr)


@app.command("simulate-jobs", cls=SelectionCommand)
@with_selection
def simulate_jobs(
    selection: Selection,
    trace: TraceOpt = None,
    sessions: SessionsOpt = None,
    seed: SeedOpt = None,
    max_jobs: Annotated[int | None, typer.Option(
        help="Simulate at most this many of the selected jobs (default: all; says so when "
             "it cuts).")] = None,
    write_policy: Annotated[str, typer.Option(
        help="write_through | write_through_selective | write_back")] = "write_through",
    output_format: Annotated[str, typer.Option("--format", help="json | table")] = "table",
    duration: DurationOpt = None,
    max_requests: MaxRequestsOpt = None,
    max_tokens_cap: MaxTokensCapOpt = None,
    think_time_cap: Annotated[float | None, typer.Option(
        help="Longest think time, s (default AgentX's idle-gap cap, 300).")] = None,
    workers: Annotated[int, typer.Option(
        help="Processes to spread the jobs over; 0 = one per available core.")] = 0,
    prune: Annotated[bool, typer.Option(
        "--prune", help="Print the CI matrix (github-matrix) of only the rows whose predicted "
        "offload benefit is within --noise or above --threshold.")] = False,
    noise: Annotated[float, typer.Option(help="--prune: |benefit| at most this.")] = 0.05,
    threshold: Annotated[float, typer.Option(help="--prune: benefit at least this.")] = 0.2,
    bounds: BoundsOpt = "agentx",
    sizing: SizingOpt = "launcher",
) -> None:
    """Simulate recipe rows: each selected job's plan (GPU and host KV tokens per rank, model,
    GPU, tp, precision) replays its workload with its concurrency as session lanes,
    GPU-resident and with the planned host tier, side by side. The workload is, unless
    --trace names another, the AgentX-shaped corpus sized to each row, replayed as AgentX
    does (3600 s, warm-up, sampled starts). DP-attention rows run one rank per attention
    group behind the job's router; multi-node rows run their prefill and decode workers; a
    row that cannot be modelled is listed with the reason."""
    from kvbench.capacity import jobs as sim_jobs
    from kvbench.sim.table import print_jobs

    if prune:
        from kvbench.cli.predict import predict_matrix

        predict_matrix(selection, trace=trace, sessions=sessions, seed=seed,
                       duration=duration, max_requests=max_requests, noise=noise,
                       threshold=threshold, emit="github-matrix", output_format=output_format,
                       workers=workers, bounds=bounds, sizing=sizing)
        return
    check_format(output_format, ("json", "table"), SimError)
    from kvbench.plan.launcher_sizing import check_mode

    check_mode(sizing)
    if workers < 0:
        raise SimError(f"--workers: {workers}; allowed: >= 0 (0 = one per core)")
    policy = _policy(write_policy)
    source = workload_source(trace, sessions, seed)
    given = bounds_given(duration, max_requests, max_tokens_cap, think_time_cap, seed, bounds)
    jobs = selected_jobs(selection, SimError)
    if max_jobs is not None and max_jobs < len(jobs):
        print(f"simulating {max_jobs} of the {len(jobs)} selected jobs (--max-jobs)",
              file=sys.stderr)
        jobs = jobs[:max_jobs]
    print(workload_line(source, given, bounds), file=sys.stderr)
    out = sim_jobs.simulate_jobs(jobs, source, given, policy,
                                 workers or sim_jobs.default_workers(), progress=_Progress(),
                                 mode=bounds, sizing=sizing)
    if output_format == "json":
        from kvbench.files import print_json

        print_json(out)
    else:
        print_jobs(out)
    print_warnings(out)
