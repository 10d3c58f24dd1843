"""`kvbench capacity`: how many agent sessions a node sustains under an SLO, per host-tier
size, predicted on the embedded simulator and (with --url) measured on a server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.errors import CapacityError
from kvbench.matrix.selection import Selection

_W = "Workload"
_S = "SLO"
_T = "Target without a recipe"


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
    trace: Annotated[list[Path] | None, typer.Option(
        help="Trace file or directory (kv-cache-tester JSON, Mooncake JSONL); repeatable.",
        rich_help_panel=_W)] = None,
    bundled_traces: Annotated[bool, typer.Option(
        "--bundled-traces", help="Replay kvbench's bundled Claude Code sessions.",
        rich_help_panel=_W)] = False,
    synthetic_sessions: Annotated[int, typer.Option(
        help="Without traces: this many synthetic agentic sessions.",
        rich_help_panel=_W)] = 64,
    synthetic_scale: Annotated[float, typer.Option(
        help="Synthetic token counts multiplied by this.", rich_help_panel=_W)] = 1.0,
    seed: Annotated[int, typer.Option(help="Synthetic workload seed.", rich_help_panel=_W)] = 0,
    think_time_scale: Annotated[float, typer.Option(rich_help_panel=_W)] = 1.0,
    think_time_cap: Annotated[float, typer.Option(
        help="Longest think time, s.", rich_help_panel=_W)] = 60.0,
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
        help="Largest concurrency tried (default: the workload's session count).")] = None,
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
) -> None:
    """Sessions under an SLO per host-tier size (simulated; measured with --url) and the knee:
    the host size beyond which more DRAM adds no sessions, with its flags."""
    import sys
    import time

    from pydantic import ValidationError

    from kvbench.capacity import (
        CapacityDoc,
        Slo,
        WorkloadBounds,
        find_knee,
        host_grid,
        predict_curve,
        sessions_to_traces,
    )
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.workload.choice import choose_workload, first_turns

    check_format(output_format, ("table", "json"), CapacityError)
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
    chosen = choose_workload(trace, bundled_traces, synthetic_sessions, synthetic_scale, seed)
    workload, paths, spec = chosen.describe, chosen.paths, chosen.synthetic
    sessions = first_turns(chosen.sessions, max_turns)
    bounds = WorkloadBounds(think_time_scale=think_time_scale, think_time_cap_s=think_time_cap,
                            max_tokens_cap=max_tokens_cap, max_input_tokens=max_input_tokens)
    workload["bounds"] = {"think_time_scale": think_time_scale,
                          "think_time_cap_s": think_time_cap, "max_tokens_cap": max_tokens_cap,
                          "max_input_tokens": max_input_tokens, "max_turns": max_turns}
    traces = sessions_to_traces(sessions, bounds)
    if not traces:
        raise CapacityError("the workload has no request within the bounds",
                            hint="raise --max-input-tokens")
    ceiling = min(max_sessions or len(traces), len(traces))
    docs = []
    from kvbench.workload.working_set import pool_warning

    for target in targets:
        warning = pool_warning(target.label, sessions, ceiling, target.tier(0.0).gpu_kv_tokens)
        row_workload = workload if warning is None else {**workload, "warning": warning}
        if warning:
            print(warning, file=sys.stderr)
        grid = sorted(set(host_gb)) if host_gb else host_grid(target.budget_gb, points)
        if any(g < 0 for g in grid):
            raise CapacityError(f"--host-gb: sizes must be >= 0, got {grid}")
        measure_gb = None
        if url is not None:
            measure_gb = target.budget_gb if server_host_gb is None else server_host_gb
            grid = sorted({*grid, measure_gb})
        predicted = predict_curve(target, traces, slo, grid, ceiling=ceiling,
                                  on_point=_progress(target, len(grid)))
        doc = CapacityDoc(
            target={"label": target.label, **target.describe}, workload=row_workload, slo=slo,
            ceiling=ceiling, predicted=predicted, knee=find_knee(predicted, ceiling),
            assumptions=[
                "at a fixed host size, meeting the SLO is monotone in sessions (the search "
                "gallops and bisects; every probe is listed)",
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
                sessions=sessions, bounds=bounds, slo=slo, ceiling=ceiling, hint=max(hint, 1),
                out_dir=output / "measured" / f"host{measure_gb:g}gb", time_scale=time_scale,
                workload=row_workload, trace=paths, synthetic=spec, engine=target.engine_name,
                tokenizer=tokenizer))
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
