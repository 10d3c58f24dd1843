"""`kvbench plan --predict` and `kvbench simulate-jobs --prune`: the selected rows ranked by
the simulator's predicted offload benefit, and the CI matrix of the rows worth a GPU."""

from __future__ import annotations

from pathlib import Path

from kvbench.cli.console import check_format
from kvbench.cli.selection import selected_jobs
from kvbench.errors import CapacityError
from kvbench.matrix.selection import Selection


def predict_matrix(selection: Selection, *, trace: list[Path] | None, noise: float,
                   threshold: float, emit: str | None, output_format: str) -> None:
    """The body of `kvbench plan --predict` and `kvbench simulate-jobs --prune`: rank the
    selected rows by predicted offload benefit; `emit="github-matrix"` prints the CI matrix
    (as `kvbench run --emit github-matrix`) of the rows kept."""
    import sys

    from kvbench.capacity import WorkloadBounds, sessions_to_traces
    from kvbench.capacity.prune import kept_jobs, predict_jobs
    from kvbench.matrix.generate import selection_runners
    from kvbench.workload.choice import choose_workload

    if emit not in (None, "github-matrix"):
        raise CapacityError(f"--emit {emit!r} is not one of github-matrix")
    check_format(output_format, ("table", "json"), CapacityError)
    jobs = selected_jobs(selection, CapacityError)
    sessions = choose_workload(trace, not trace, 0, 1.0, 0).sessions
    traces = sessions_to_traces(sessions, WorkloadBounds())
    predictions = predict_jobs(jobs, selection_runners(selection), traces, noise=noise,
                               threshold=threshold)
    from kvbench.workload.working_set import pool_warnings

    for line in pool_warnings(sessions, [(p.exp_name, p.conc, p.arms["offload"]["gpu_kv_tokens"])
                                         for p in predictions if p.arms]):
        print(line, file=sys.stderr)
    if emit == "github-matrix":
        import orjson

        from kvbench.matrix.generate import runner_config_path
        from kvbench.sweep import RunOptions, build_specs
        from kvbench.sweep.emit import github_matrix
        from kvbench.sweep.quickstart import embedded_defaults

        kept = kept_jobs(predictions, jobs)
        options = RunOptions(trace=list(trace) if trace else None, bundled_traces=not trace)
        options = embedded_defaults(kept, options) or options  # as `kvbench run` bounds them
        specs = build_specs(kept, options, runner_config=runner_config_path(selection))
        sys.stdout.write(orjson.dumps(github_matrix(specs)).decode() + "\n")
        return
    if output_format == "json":
        from kvbench.files import print_json

        print_json([p.to_json() for p in predictions])
        return
    from rich.console import Console
    from rich.table import Table

    kept = sum(p.kept for p in predictions)
    table = Table(title=f"predicted offload benefit (1 - TTFT p90 offload / resident): "
                  f"{kept} of {len(predictions)} kept (noise {noise:g}, threshold "
                  f"{threshold:g})")
    for col in ("exp-name", "conc", "TTFT p90 ms resident", "TTFT p90 ms offload",
                "hit % res/off", "benefit", "verdict"):
        table.add_column(col, justify="left" if col in ("exp-name", "verdict") else "right")
    for p in predictions:
        res, off = p.arms.get("resident"), p.arms.get("offload")

        def ms(arm: dict | None) -> str:
            return "-" if not arm or arm["ttft_p90_ms"] is None else f"{arm['ttft_p90_ms']:,.0f}"

        hits = "-" if not res else f"{res['hit_rate']:.0%} / {off['hit_rate']:.0%}"
        table.add_row(p.exp_name, str(p.conc), ms(res), ms(off), hits,
                      "-" if p.benefit is None else f"{p.benefit:+.1%}", p.verdict)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
