"""`kvbench plan`: the host-memory plan of every selected job, or the reason it is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.cli.trace_option import TRACE_HELP
from kvbench.matrix.selection import Selection

_PREDICT = "Predicted offload benefit (kvbench capacity)"


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

    from kvbench.cli.plan_fast import run_plan

    run_plan(selection, format=format, details=details, host_headroom_gb=host_headroom_gb,
             trust_runner_dram=trust_runner_dram, sizing=sizing, force=force)
