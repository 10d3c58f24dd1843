"""`kvbench plan --predict` and `kvbench simulate-jobs --prune`: the selected rows ranked by
the simulator's predicted offload benefit, and the CI matrix of the rows worth a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.cli.console import check_format
from kvbench.cli.selection import selected_jobs
from kvbench.errors import CapacityError
from kvbench.matrix.selection import Selection


def predict_matrix(selection: Selection, *, trace: list | None, noise: float, threshold: float,
                   emit: str | None, output_format: str, sessions: int | None = None,
                   seed: int | None = None, duration: float | None = None,
                   max_requests: int | None = None, workers: int = 0,
                   bounds: str = "agentx", sizing: str = "launcher",
                   emit_dir: Path | None = None) -> None:
    """The body of `kvbench plan --predict` and `kvbench simulate-jobs --prune`: simulate
    every selected row with a host tier on its workload (as simulate-jobs does), rank them
    by predicted offload benefit; `emit="github-matrix"` prints the CI matrix (as
    `kvbench run --emit github-matrix`) of the rows kept."""

    from kvbench.capacity import jobs as sim_jobs
    from kvbench.capacity.prune import has_host_tier, kept_jobs, predict_jobs
    from kvbench.cli.simulate_jobs import (
        _Progress,
        bounds_given,
        print_warnings,
        workload_line,
        workload_source,
    )

    if emit not in (None, "github-matrix"):
        raise CapacityError(f"--emit {emit!r} is not one of github-matrix")
    if emit_dir is not None and emit is None:
        raise CapacityError("--emit-dir goes with --emit github-matrix")
    check_format(output_format, ("table", "json"), CapacityError)
    if workers < 0:
        raise CapacityError(f"--workers: {workers}; allowed: >= 0 (0 = one per core)")
    jobs = selected_jobs(selection, CapacityError)
    source = workload_source(trace, sessions, seed)
    given = bounds_given(duration, max_requests, None, None, seed, bounds)
    print(workload_line(source, given, bounds), file=sys.stderr)
    offload = [j for j in jobs if has_host_tier(j)]
    out = sim_jobs.simulate_jobs(offload, source, given, "write_through",
                                 workers or sim_jobs.default_workers(), progress=_Progress(),
                                 mode=bounds, sizing=sizing)
    predictions = predict_jobs(jobs, {id(j): e for j, e in zip(offload, out, strict=True)},
                               noise=noise, threshold=threshold)
    print_warnings(out)
    if emit == "github-matrix":
        from kvbench.matrix.generate import runner_config_path
        from kvbench.sweep import RunOptions, build_specs
        from kvbench.sweep.emit import emit_github_matrix
        from kvbench.sweep.quickstart import embedded_defaults

        kept = kept_jobs(predictions, jobs)
        paths = source.trace_paths
        options = RunOptions(trace=list(source.paths) if paths and source.paths else None,
                             bundled_traces=source.bundled or source.kind == "corpus")
        options = embedded_defaults(kept, options) or options  # as `kvbench run` bounds them
        specs = build_specs(kept, options, runner_config=runner_config_path(selection))
        sys.stdout.write(emit_github_matrix(specs, checkout=Path.cwd(), emit_dir=emit_dir)
                         + "\n")
        return
    if output_format == "json":
        from kvbench.files import print_json

        print_json([p.to_json() for p in predictions])
        return
    _print_table(predictions, noise, threshold)


def _print_table(predictions: list, noise: float, threshold: float) -> None:
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    kept = sum(p.kept for p in predictions)
    verdicts = Counter(p.verdict for p in predictions)
    table = Table(title=f"predicted offload benefit (1 - TTFT p90 offload / resident): "
                  f"{kept} of {len(predictions)} kept (noise {noise:g}, threshold "
                  f"{threshold:g}): " + ", ".join(f"{n} {v}" for v, n in verdicts.items()))
    for col in ("exp-name", "conc", "TTFT p90 ms resident", "TTFT p90 ms offload",
                "hit % res/off", "benefit", "verdict"):
        table.add_column(col, justify="left" if col in ("exp-name", "verdict") else "right")
    for p in predictions:
        res, off = p.arms.get("resident"), p.arms.get("offload")

        def ms(arm: dict | None) -> str:
            return "-" if not arm or arm["ttft_p90_ms"] is None else f"{arm['ttft_p90_ms']:,.0f}"

        hits = "-" if not res else f"{res['hit_rate']:.0%} / {off['hit_rate']:.0%}"
        verdict = p.verdict if p.reason is None else f"{p.verdict}: {p.reason}"
        table.add_row(p.exp_name, str(p.conc), ms(res), ms(off), hits,
                      "-" if p.benefit is None else f"{p.benefit:+.1%}", verdict)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
