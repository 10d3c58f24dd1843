"""`kvbench plan`: the host-memory plan of every selected job, or the reason it is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.cli.trace_option import TRACE_HELP
from kvbench.matrix.selection import Selection

_GB = 1_000_000_000
_PREDICT = "Predicted offload benefit (kvbench capacity)"


def _pools_cell(plan) -> str:
    return "\n".join(
        f"{p.name} {p.bytes_per_rank / _GB:,.2f}{'' if p.inside_configured_size else '*'}"
        for p in plan.host_pools
    ) or "-"


def _verdict(plan) -> str:
    if plan.forced:
        return "[bold yellow]FORCED[/]"
    return "ok" if plan.accepted else "[bold red]REFUSED[/]"


def _other_sizing(plan) -> str:
    """The projected node bytes of the sizing that did not run: `budget 1,161`."""
    other = plan.budget_sizing if plan.sizing == "launcher" else plan.launcher_sizing
    if not other:
        return "-"
    name = "budget" if plan.sizing == "launcher" else "launcher"
    return f"{name} {other['projected-host-bytes'] / _GB:,.0f}"


def _print_table(jobs: list, plans: list, details: bool) -> None:
    from rich.table import Table

    refused = [p for p in plans if not p.accepted]
    table = Table(
        title=f"{len(plans)} plans, {len(refused)} refused "
        "(host pools in GB per rank; * = outside the configured size)"
    )
    # exp-names repeat across config keys and runners: the id and key tell rows apart;
    # beside the sizing that ran, what the other one projects (launcher vs budget)
    for column in ("id", "config key", "exp-name", "hw", "backend", "budget GB", "sizing",
                   "host pools", "projected GB", "other sizing GB", "headroom GB", "verdict"):
        table.add_column(column, justify="right" if "GB" in column else "left")
    for job, p in zip(jobs, plans, strict=True):
        offload = p.backend is not None
        table.add_row(
            job.short_id, p.config_key, p.exp_name, p.hardware,
            p.backend or "none",
            f"{p.budget_gb:,}" if offload else "-",
            p.sizing or "-",
            _pools_cell(p),
            f"{p.projected_host_bytes / _GB:,.0f}" if offload else "-",
            _other_sizing(p),
            f"{p.headroom_bytes / _GB:,.0f}" if offload else "-",
            _verdict(p),
        )
    from kvbench.cli.console import table_console

    console = table_console()
    console.print(table)
    for p in plans if details else refused + [p for p in plans if p.forced]:
        console.print(f"\n[bold]{p.exp_name}[/] ({p.config_key}, {p.hardware})",
                      highlight=False)
        for line in p.errors:
            console.print(f"  [red]error:[/] {line}", highlight=False)
        for line in p.arithmetic:
            console.print(f"  {line}", highlight=False, markup=False)
        for line in p.warnings if details or p.forced else []:
            console.print(f"  [yellow]warning:[/] {line}", highlight=False)


def _with_workers(job, plan, runners) -> dict:
    """A disaggregated SGLang row's plan with every worker's own plan and placement
    (kvbench.plan.workers), which is what `kvbench launch` starts."""
    out = plan.to_json()
    if job.framework == "sglang-disagg":
        from kvbench.plan.workers import plan_workers

        planned = plan_workers(job, runners)
        out["workers"] = [{"role": w.role, "index": w.index, "nodes": list(w.nodes),
                           "plan": w.plan.to_json()} for w in planned.workers]
        out["workers-errors"] = list(planned.errors)
    return out


@app.command(cls=SelectionCommand)
@with_selection
def plan(
    selection: Selection,
    format: Annotated[
        str, typer.Option("--format", help="table (default) or json (one object per job).")
    ] = "table",
    details: Annotated[
        bool, typer.Option("--details", help="Table: print arithmetic and warnings of every job.")
    ] = False,
    host_headroom_gb: Annotated[
        float | None, typer.Option(
            "--host-headroom-gb",
            help="Host memory per node kept free of KV pools (engine processes, weight page "
                 "cache); default 1 GB per rank.")
    ] = None,
    trust_runner_dram: Annotated[
        bool, typer.Option(
            "--trust-runner-dram",
            help="Accept a runners.yaml that claims more DRAM than the hardware profile "
                 "installs (refused otherwise).")
    ] = False,
    sizing: Annotated[str, typer.Option(
        "--sizing", help="launcher (default): the InferenceX launcher's own host-pool "
        "arithmetic for the row, refused only where it oversubscribes the row's DRAM budget "
        "(a row no launcher sizes is budget-sized); budget: the largest pools the budget "
        "holds less kvbench's host headroom. Each plan shows the other's bytes.")] = "launcher",
    force: Annotated[bool, typer.Option(
        "--force", help="Launcher sizing: accept a launcher size that oversubscribes the "
        "budget (the verdict stays in the warnings).")] = False,
    predict: Annotated[bool, typer.Option(
        "--predict", help="Rank rows by the simulator's predicted offload benefit instead.",
        rich_help_panel=_PREDICT)] = False,
    trace: Annotated[list[str] | None, typer.Option(
        help="--predict: " + TRACE_HELP + "; default: agentx.",
        rich_help_panel=_PREDICT)] = None,
    duration: Annotated[float | None, typer.Option(
        help="--predict: simulated seconds a row (default AgentX's 3600; a shorter run is "
        "said).", rich_help_panel=_PREDICT)] = None,
    workers: Annotated[int, typer.Option(
        help="--predict: processes to spread the rows over; 0 = one per available core.",
        rich_help_panel=_PREDICT)] = 0,
    bounds: Annotated[str, typer.Option(
        help="--predict: agentx (AgentX's duration, warm-up, sampled starts) or once (each "
        "session once from its first turn).", rich_help_panel=_PREDICT)] = "agentx",
    noise: Annotated[float, typer.Option(
        help="--predict: keep pairs whose |benefit| is at most this.",
        rich_help_panel=_PREDICT)] = 0.05,
    threshold: Annotated[float, typer.Option(
        help="--predict: keep pairs whose benefit is at least this.",
        rich_help_panel=_PREDICT)] = 0.2,
    emit: Annotated[str | None, typer.Option(
        help="--predict: print the CI matrix of the kept rows: github-matrix.",
        rich_help_panel=_PREDICT)] = None,
    emit_dir: Annotated[Path | None, typer.Option(
        help="--emit github-matrix: write each job's spec here and print matrices of at most "
             "256 jobs naming them (GitHub's limits; docs/sweeps.md).",
        rich_help_panel=_PREDICT)] = None,
) -> None:
    """Size the host KV pools of each selected job as its InferenceX launcher does (or from
    its DRAM budget), or refuse it."""
    import json

    if predict:
        from kvbench.cli.predict import predict_matrix

        predict_matrix(selection, trace=trace, noise=noise, threshold=threshold, emit=emit,
                       output_format=format, emit_dir=emit_dir, duration=duration,
                       workers=workers, bounds=bounds, sizing=sizing)
        return
    if emit is not None or emit_dir is not None:
        from kvbench.errors import PlanError

        flag = "--emit" if emit is not None else "--emit-dir"
        raise PlanError(f"{flag} goes with --predict: plan prints plans; the CI matrix of the "
                        "rows worth a GPU is `plan --predict --emit github-matrix`",
                        hint="add --predict, or `kvbench run --emit github-matrix` for every "
                             "selected job")

    from kvbench.errors import PlanError
    from kvbench.matrix import select_jobs
    from kvbench.matrix.generate import selection_runners
    from kvbench.plan import plan_job
    from kvbench.plan.launcher_sizing import check_mode

    if format not in ("json", "table"):
        raise PlanError(f"--format {format!r} is not allowed (allowed: json, table)")
    check_mode(sizing, force)
    if host_headroom_gb is not None and host_headroom_gb < 0:
        raise PlanError(f"--host-headroom-gb {host_headroom_gb:g} is negative; allowed: >= 0")
    runners = selection_runners(selection)
    jobs = select_jobs(selection)
    plans = [plan_job(job, runners, host_headroom_gb=host_headroom_gb,
                      trust_runner_dram=trust_runner_dram, sizing=sizing, force=force)
             for job in jobs]
    if format == "json":
        print(json.dumps([_with_workers(job, p, runners) for job, p in zip(jobs, plans,
                                                                           strict=True)],
                         indent=1))
    else:
        _print_table(jobs, plans, details)
    if plans and not any(p.accepted for p in plans):
        # printed in full above; the exit status says that nothing here can run
        raise PlanError(f"every one of the {len(plans)} selected plans is refused",
                        hint="--details shows each one's arithmetic"
                        + ("; --force runs a launcher's size anyway"
                           if any(p.sizing == "launcher" for p in plans) else ""))
