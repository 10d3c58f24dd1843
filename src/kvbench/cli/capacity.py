"""`kvbench capacity`: how many agent sessions a node sustains under an SLO, per host-tier
size, predicted on the embedded simulator and (with --url) measured on a server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.cli.simulate_jobs import BoundsOpt
from kvbench.cli.trace_option import TRACE_HELP
from kvbench.errors import CapacityError
from kvbench.matrix.selection import Selection

_W = "Workload"
_S = "SLO"
_T = "Target without a recipe"
# the search's default top: twice InferenceX's largest AgentX point (512 lanes a node)
DEFAULT_CEILING = 1024


def _targets(selection: Selection, *, model, hardware, tp, precision, engine_profile,
             budget_gb, gpu_tokens, write_policy, engine) -> list:
    """One target per distinct offload row of the selection (or the direct one)."""
    from kvbench.capacity.target import offload_rows, target_direct, target_from_job

    if not selection.config_files:
        if budget_gb is None:
            raise CapacityError("without --config-files, give the host budget per rank",
                                hint="pass --budget-gb GB (or select a recipe row)")
        return [target_direct(model, hardware, tp, precision=precision,
                              engine_profile=engine_profile, budget_gb=budget_gb,
                              gpu_tokens=gpu_tokens, write_policy=write_policy, engine=engine)]
    from kvbench.matrix import select_jobs
    from kvbench.matrix.generate import selection_runners

    rows = offload_rows(select_jobs(selection))
    if not rows:
        raise CapacityError("capacity sizes recipe rows with a host tier; the selection has "
                            "0 (none)", hint="select rows with kv-offloading: dram "
                            "(--config-keys)")
    runners = selection_runners(selection)
    targets = [target_from_job(job, runners, engine, gpu_tokens) for job in rows]
    _distinct_labels(targets, rows)
    for target in targets:
        if budget_gb is not None:
            if budget_gb > target.budget_gb:
                raise CapacityError(f"--budget-gb {budget_gb:g} exceeds the planner's host "
                                    f"size for {target.label} ({target.budget_gb:g} GB per "
                                    "rank)")
            target.budget_gb = budget_gb
    return targets


def _distinct_labels(targets: list, rows: list) -> None:
    """Rows of one key can share an exp-name (they differ in runner, ep, ...): such labels
    get the fields that tell them apart."""
    seen: dict[str, list[int]] = {}
    for i, t in enumerate(targets):
        seen.setdefault(t.label, []).append(i)
    for same in (ix for ix in seen.values() if len(ix) > 1):
        keys = sorted({k for i in same for k in rows[i].row if k not in ("conc", "exp-name")})
        differ = [k for k in keys if len({repr(rows[i].row.get(k)) for i in same}) > 1]
        for i in same:
            tail = "_".join(f"{k}-{rows[i].row.get(k)}" for k in differ) or str(i)
            targets[i].label = f"{targets[i].label}_{tail}".replace(" ", "")


def _progress(target, points: int):
    """A line per host size on stderr (a search over a large workload takes minutes)."""
    import sys
    import time

    from kvbench.capacity.curve import sessions_text

    t0, done = time.perf_counter(), [0]

    def on_point(point) -> None:
        done[0] += 1
        print(f"capacity {target.label}: host {point.host_gb:g} GB -> "
              f"{sessions_text(point.max_sessions, None)} ({len(point.steps)} probes; "
              f"{done[0]}/{points} sizes, {time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)

    return on_point


@app.command("capacity", cls=SelectionCommand)
@with_selection
def capacity(
    selection: Selection,
    trace: Annotated[list[str] | None, typer.Option(
        help=TRACE_HELP + "; default: agentx.", rich_help_panel=_W)] = None,
    bundled_traces: Annotated[bool, typer.Option(
        "--bundled-traces", help="The same as --trace bundled.", rich_help_panel=_W)] = False,
    sessions: Annotated[int | None, typer.Option(
        help="agentx: at least this many corpus sessions (default AgentX's 393; the search's "
        "ceiling needs no more: lanes recycle sessions).", rich_help_panel=_W)] = None,
    synthetic_sessions: Annotated[int | None, typer.Option(
        help="--trace synthetic: this many sessions (default 64; alone, implies it).",
        rich_help_panel=_W)] = None,
    synthetic_scale: Annotated[float | None, typer.Option(
        help="--trace synthetic: token counts multiplied by this (alone, implies it).",
        rich_help_panel=_W)] = None,
    seed: Annotated[int | None, typer.Option(
        help="Workload seed (the corpus or synthetic draw, and the sampled starts: AgentX's 42 "
        "by default).", rich_help_panel=_W)] = None,
    duration: Annotated[float | None, typer.Option(
        help="Simulated seconds a probe replays (default AgentX's 3600; a shorter run is "
        "said).", rich_help_panel=_W)] = None,
    max_requests: Annotated[int | None, typer.Option(
        help="Profiled requests a probe sends (with no --duration: instead of AgentX's).",
        rich_help_panel=_W)] = None,
    think_time_scale: Annotated[float, typer.Option(rich_help_panel=_W)] = 1.0,
    think_time_cap: Annotated[float | None, typer.Option(
        help="Longest think time, s (default AgentX's idle-gap cap, 300).",
        rich_help_panel=_W)] = None,
    max_tokens_cap: Annotated[int | None, typer.Option(rich_help_panel=_W)] = None,
    max_input_tokens: Annotated[int | None, typer.Option(
        help="Turns with longer prompts are skipped.", rich_help_panel=_W)] = None,
    max_turns: Annotated[int | None, typer.Option(
        help="Only each session's first N turns (shorter steps, same requests in both "
        "executors).", rich_help_panel=_W)] = None,
    ttft_p90_ms: Annotated[float | None, typer.Option(rich_help_panel=_S)] = 2000.0,
    itl_p99_ms: Annotated[float | None, typer.Option(
        help="Per-request mean inter-token latency (TPOT) p99.", rich_help_panel=_S)] = None,
    interactivity: Annotated[float | None, typer.Option(
        help="Tokens/s per session (1000/TPOT) p50 at least this.", rich_help_panel=_S)] = None,
    max_failed_ratio: Annotated[float, typer.Option(rich_help_panel=_S)] = 0.01,
    host_gb: Annotated[list[float] | None, typer.Option(
        help="Host-tier sizes per rank to try (GB); default: a grid from 0 to the budget.")
    ] = None,
    points: Annotated[int, typer.Option(help="Grid steps between 0 and the budget.")] = 8,
    budget_gb: Annotated[float | None, typer.Option(
        help="Top of the grid, GB per rank (default: the planner's size for the row).")] = None,
    max_sessions: Annotated[int | None, typer.Option(
        help="Largest concurrency tried (default 1024; --bounds once: at most the workload's "
        "sessions).")] = None,
    model: Annotated[str, typer.Option(rich_help_panel=_T)] = "reference-8b",
    hardware: Annotated[str, typer.Option(rich_help_panel=_T)] = "h200",
    tp: Annotated[int, typer.Option(rich_help_panel=_T)] = 1,
    model_precision: Annotated[str | None, typer.Option(
        help="bf16 | fp8 | fp4 (default: from the model name).", rich_help_panel=_T)] = None,
    engine_profile: Annotated[str, typer.Option(rich_help_panel=_T)] = "sglang",
    gpu_tokens: Annotated[int | None, typer.Option(
        help="Device KV tokens per rank (default: from HBM; with a recipe row, the planner's). "
        "Give it when the server's arguments cap the GPU pool (--kv-cache-memory-bytes).")
    ] = None,
    write_policy: Annotated[str, typer.Option(rich_help_panel=_T)] = "write_through",
    max_running_requests: Annotated[int, typer.Option()] = 256,
    chunked_prefill_tokens: Annotated[int, typer.Option()] = 8192,
    url: Annotated[str | None, typer.Option(
        help="Also measure on this server (replay steps) at --server-host-gb.")] = None,
    served_model: Annotated[str | None, typer.Option(
        help="--url: model name (default: /v1/models).")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="--url: the served model's tokenizer (directory or name), so that prompts have "
        "exactly the workload's token counts.")] = None,
    server_host_gb: Annotated[float | None, typer.Option(
        help="--url: the server's host tier per rank, GB (default: the grid's top).")] = None,
    time_scale: Annotated[float, typer.Option(
        help="--url: the server's clock runs this much faster (serve-sim --time-scale).")
    ] = 1.0,
    output: Annotated[Path | None, typer.Option(
        help="Directory for capacity.json and capacity.html (with --url: each step's "
        "result.json and dashboard.html).")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="table | json")] = "table",
    bounds: BoundsOpt = "agentx",
    workers: Annotated[int, typer.Option(
        help="Processes the host sizes' searches spread over; 0 = one per available core.")
    ] = 0,
) -> None:
    """Sessions under an SLO per host-tier size (simulated; measured with --url) and the knee:
    the host size beyond which more DRAM adds no sessions, with its flags."""
    import sys
    import time

    from pydantic import ValidationError

    from kvbench.capacity import CapacityDoc, Slo, find_knee, host_grid, predict_curve
    from kvbench.capacity.jobs import default_workers, row_bounds
    from kvbench.cli.simulate_jobs import workload_line
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.workload.choice import first_turns, parse_trace

    check_format(output_format, ("table", "json"), CapacityError)
    if workers < 0:
        raise CapacityError(f"--workers: {workers}; allowed: >= 0 (0 = one per core)")
    if url is not None and output is None:
        raise CapacityError("--url writes one result.json per step", hint="add --output DIR")
    try:
        slo = Slo(ttft_p90_ms=ttft_p90_ms, itl_p99_ms=itl_p99_ms,
                  interactivity_p50_tok_s=interactivity, failed_ratio=max_failed_ratio)
    except ValidationError as e:
        err = e.errors()[0]
        raise CapacityError(f"SLO: {err['msg']}", hint="give --ttft-p90-ms, --itl-p99-ms or "
                            "--interactivity (a positive number)") from None
    t0 = time.perf_counter()
    engine = EngineConfig(max_running_requests=max_running_requests,
                          chunked_prefill_tokens=chunked_prefill_tokens)
    targets = _targets(selection, model=model, hardware=hardware, tp=tp,
                       precision=model_precision, engine_profile=engine_profile,
                       budget_gb=budget_gb, gpu_tokens=gpu_tokens, write_policy=write_policy,
                       engine=engine)
    if url is not None and len(targets) > 1:
        raise CapacityError(f"--url measures one row; the selection has {len(targets)} "
                            f"({', '.join(t.label for t in targets)})",
                            hint="narrow it with --config-keys, --framework or --model-prefix")
    for flag, value in (("--synthetic-sessions", synthetic_sessions), ("--sessions", sessions)):
        if value is not None and value < 1:
            raise CapacityError(f"{flag} must be >= 1, got {value}")
    if synthetic_scale is not None and not synthetic_scale > 0:
        raise CapacityError(f"--synthetic-scale must be > 0, got {synthetic_scale:g}")
    words = list(trace or [])
    if bundled_traces:
        words = ["bundled", *words]
    elif not words and (synthetic_sessions is not None or synthetic_scale is not None):
        words = ["synthetic"]
    source = parse_trace(words, synthetic_sessions=synthetic_sessions or 64,
                         synthetic_scale=1.0 if synthetic_scale is None else synthetic_scale,
                         seed=seed or 0, corpus_sessions=sessions)
    given = {"duration_s": duration, "max_requests": max_requests,
             "think_time_scale": think_time_scale, "think_time_cap_s": think_time_cap,
             "max_tokens_cap": max_tokens_cap, "max_input_tokens": max_input_tokens,
             "seed": seed}

    def bounds_for(c: int):
        return row_bounds(c, given, bounds)

    bounds_for(1)  # bad bounds fail here, once
    print(workload_line(source, given, bounds), file=sys.stderr)
    docs = []
    from kvbench.capacity.jobs import fill_warnings

    for target in targets:
        ceiling = max_sessions or DEFAULT_CEILING
        sessions_all = first_turns(source.sessions_for(target.model_prefix, ceiling),
                                   max_turns)
        if bounds == "once":  # each session once: no more lanes than sessions
            ceiling = min(ceiling, len(sessions_all))
        if ceiling < 1:
            raise CapacityError(f"--max-sessions must be >= 1, got {ceiling}")
        if not any(s.turns for s in sessions_all):
            raise CapacityError("the workload has no request within the bounds",
                                hint="raise --max-input-tokens")
        workload = {**source.describe(target.model_prefix, ceiling),
                    "bounds": {k: v for k, v in given.items() if v is not None}
                    | {"max_turns": max_turns}}
        pool = fill_warnings(target.label, sessions_all, bounds_for(ceiling),
                             target.tier(0.0).gpu_kv_tokens * target.ranks)["pool"]
        row_workload = workload if pool is None else {**workload, "warning": pool}
        if pool:
            print(pool, file=sys.stderr)
        grid = sorted(set(host_gb)) if host_gb else host_grid(target.budget_gb, points)
        if any(g < 0 for g in grid):
            raise CapacityError(f"--host-gb: sizes must be >= 0, got {grid}")
        measure_gb = None
        if url is not None:
            measure_gb = target.budget_gb if server_host_gb is None else server_host_gb
            grid = sorted({*grid, measure_gb})
        predicted = predict_curve(target, sessions_all, bounds_for, slo, grid, ceiling=ceiling,
                                  on_point=_progress(target, len(grid)),
                                  workers=workers or default_workers())
        probed = max((st.concurrency for p in predicted for st in p.steps), default=1)
        lanes = fill_warnings(target.label, sessions_all, bounds_for(probed), None)["lanes"]
        if lanes:
            print(lanes, file=sys.stderr)
            row_workload = {**row_workload, "warning": " ".join(
                w for w in (row_workload.get("warning"), lanes) if w)}
        doc = CapacityDoc(
            target={"label": target.label, **target.describe}, workload=row_workload, slo=slo,
            ceiling=ceiling, predicted=predicted, knee=find_knee(predicted, ceiling),
            assumptions=[
                "at a fixed host size, meeting the SLO is monotone in sessions (the search "
                "gallops and bisects; every probe is listed)",
                "each probe replays the workload as AgentX does unless flags say otherwise "
                "(duration, warm-up per lane, sampled starts; lanes recycle sessions, each "
                "pass cache-busted)" if bounds == "agentx" else
                "each session is played once; concurrency is capped by the session count",
                "simulated probes start from an empty cache",
                "prompts refused as longer than the context (400) are not failures: the "
                "failed ratio leaves them out",
            ])
        if url is not None:
            from kvbench.capacity.measure import measure_point
            from kvbench.cli.replay import _first_model

            hint = next(p.max_sessions for p in predicted if p.host_gb == measure_gb)
            doc.measured.append(measure_point(
                target, measure_gb, url=url, model=served_model or _first_model(url),
                sessions=sessions_all, bounds_for=bounds_for, slo=slo, ceiling=ceiling,
                hint=max(hint, 1), out_dir=output / "measured" / f"host{measure_gb:g}gb",
                time_scale=time_scale, workload=row_workload, trace=source.trace_paths,
                synthetic=source.synthetic, engine=target.engine_name, tokenizer=tokenizer))
        doc.wall_s = time.perf_counter() - t0
        docs.append(doc)
        if output is not None:
            _write(doc, output if len(targets) == 1 else output / target.label)
        if output_format != "json":
            from kvbench.capacity.table import print_capacity

            print_capacity(doc)
    if output_format == "json":
        body = [d.model_dump(mode="json") for d in docs]
        from kvbench.files import print_json

        print_json(body[0] if len(body) == 1 else body)


def _write(doc, output: Path) -> None:
    from kvbench.capacity.curve import CAPACITY_FILE
    from kvbench.files import write_json_atomic
    from kvbench.report.capacity import write_capacity_page

    write_json_atomic(output / CAPACITY_FILE, doc.model_dump(mode="json"))
    write_capacity_page([output / CAPACITY_FILE], output / "capacity.html")
    if doc.measured:
        from kvbench.report import write_dashboard

        write_dashboard([output], output / "dashboard.html", owned=True)
