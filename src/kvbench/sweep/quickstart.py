"""`kvbench quickstart`: the examples/quickstart.yaml sweep on the embedded engine, sized to
finish in well under two minutes on two CPU cores, then the comparison and the dashboard."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kvbench.errors import SweepError
from kvbench.sweep.options import PhaseTimeouts, RunOptions, bundled_traces

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "examples" / "quickstart.yaml"
MAX_REQUESTS_PER_JOB = 85  # every request of the eight bundled sessions, once
# Output capped: decode time dominates a turn and the comparison is about the prompt's KV;
# this is what lets three repeats of six jobs finish within the minute on two cores.
MAX_TOKENS_CAP = 64
SCRAPE_INTERVAL_S = 0.1
REPEATS = 3  # a delta needs a noise estimate: three runs per point
READY_TIMEOUT_S = 60.0
# the quickstart's minute (issue 15; issue 27 item 10: on two cores, one of them busy), of
# which the time-scale probe takes a few seconds
BUDGET_S = 55.0
PROBE_TIME_SCALE = 50.0  # the engine's default (engines/data/sim.yaml); the probe starts there
REPLAY_TIMEOUT_S = 90.0


def embedded_defaults(jobs: Sequence, options: RunOptions) -> RunOptions | None:
    """`kvbench run` on embedded-engine rows only, with no workload bound given: the
    quickstart's workload instead of the rows' hour (the reference's default for GPUs), so
    `kvbench run examples/quickstart.yaml` finishes in the quickstart's minute. None when
    a job is not the embedded engine's or the user bounded the run. Whatever emits the same
    jobs' matrix calls it too, so fingerprints agree. (The clock scale comes with the
    engine: engines/data/sim.yaml.)"""
    if not jobs or any(j.framework != "sim" for j in jobs):
        return None
    if options.duration_s is not None or options.max_requests is not None:
        return None
    update: dict = {"max_requests": MAX_REQUESTS_PER_JOB, "scrape_interval_s": SCRAPE_INTERVAL_S}
    if options.think_time_scale == 1.0:
        update["think_time_scale"] = 0.0
    if options.max_tokens_cap is None:
        update["max_tokens_cap"] = MAX_TOKENS_CAP
    return options.model_copy(update=update)


def quickstart_options(time_scale: float) -> RunOptions:
    # Think times are dropped: at a 50x clock a 60 s pause would still cost a second each.
    return RunOptions(
        bundled_traces=True, max_requests=MAX_REQUESTS_PER_JOB, think_time_scale=0.0,
        max_tokens_cap=MAX_TOKENS_CAP,
        # a second of wall time is 50 s of the engine's: scrape often enough for a timeline
        scrape_interval_s=SCRAPE_INTERVAL_S,
        engine_args=["--time-scale", str(time_scale)],
        timeouts=PhaseTimeouts(ready_s=READY_TIMEOUT_S, replay_s=REPLAY_TIMEOUT_S),
    )


def quickstart_run(results: Path, *, time_scale: float | None, run_sweep: Callable,
                   recipe: Path = RECIPE, repeats: int = REPEATS,
                   budget_s: float = BUDGET_S, placement: bool = True) -> list:
    """The quickstart sweep; `time_scale` None: the scale this machine's client sustains
    (sweep/pace.py), chosen by a probe job, or by the first run of this results directory.
    `placement`: the client and engine first move to the idle cores (sweep/placement.py)."""
    import sys

    from kvbench.matrix.selection import Selection

    if not recipe.is_file():
        raise SweepError(f"the quickstart recipe is not at {recipe}",
                         hint="run from a source checkout: pip install -e . && kvbench quickstart")
    if not bundled_traces():
        raise SweepError("the bundled Claude Code traces are missing from the installation")
    selection = Selection(config_files=(recipe,), runner_config=recipe.parent / "runners.yaml")
    if placement:
        from kvbench.sweep.placement import place

        print(place().line(), file=sys.stderr)
    if time_scale is None:
        pace = quickstart_pace(selection, Path(results), repeats=repeats, budget_s=budget_s)
        print(pace.line(), file=sys.stderr)
        time_scale = pace.time_scale
    return run_sweep(selection, quickstart_options(time_scale), results=Path(results),
                     continue_on_error=True, repeat=repeats)


def _replay_units(jobs: list, probe_job, probe_options: RunOptions, selection,
                  repeats: int) -> float | None:
    """The sweep's replays in units of the probe's: their engine-clock seconds, each job
    simulated beforehand (sweep/forecast.py); None when one cannot be."""
    from kvbench.matrix.generate import selection_runners
    from kvbench.sweep.forecast import engine_seconds
    from kvbench.workload import load_trace

    runners = selection_runners(selection)
    sessions = load_trace(probe_options.trace_paths())
    options = quickstart_options(PROBE_TIME_SCALE)
    probe_s = engine_seconds(probe_job, probe_options, runners, sessions)
    each = [engine_seconds(j, options, runners, sessions) for j in jobs]
    if not probe_s or any(s is None for s in each):
        return None
    return repeats * sum(each) / probe_s


def quickstart_pace(selection, results: Path, *, repeats: int, budget_s: float):
    """The pace an earlier run of `results` chose, else a probe of the sweep's heaviest point
    (the highest concurrency, resident: the most streams) at the default scale."""
    import sys

    from kvbench.matrix import select_jobs
    from kvbench.matrix.generate import runner_config_path
    from kvbench.sweep import pace
    from kvbench.sweep.job import run_job
    from kvbench.sweep.spec import build_specs

    earlier = pace.saved(results)
    if earlier is not None:
        return pace.Pace(earlier.time_scale, f"{earlier.reason} (chosen by the first run of "
                                             f"{results})", earlier.probe)
    jobs = select_jobs(selection)
    heaviest = max(jobs, key=lambda j: (j.conc, j.kv_offloading == "none"))
    options = quickstart_options(PROBE_TIME_SCALE).model_copy(
        update={"max_requests": pace.PROBE_REQUESTS})
    spec, warm = (build_specs([heaviest], options.model_copy(update={"max_requests": n}),
                              runner_config=runner_config_path(selection))[0]
                  for n in (pace.PROBE_REQUESTS, pace.WARM_UP_REQUESTS))
    print(f"time scale: probing what the client sustains ({spec.dir_name}, "
          f"{pace.PROBE_REQUESTS} requests at {PROBE_TIME_SCALE:g}x)", file=sys.stderr)
    units = _replay_units(jobs, heaviest, options, selection, repeats)
    t0 = time.perf_counter()
    # the first job of a process also imports what every job runs (0.35 s of its 0.9 s of
    # start, stop and results here): a short run first, so the probe's cost is any job's
    pace.probe(warm, run_job=run_job)
    figures = pace.probe(spec, run_job=run_job)
    # the probes' own time is spent already: the sweep gets what is left of the budget
    chosen = pace.choose(figures, probe_scale=PROBE_TIME_SCALE, jobs=len(jobs) * repeats,
                         requests_per_job=MAX_REQUESTS_PER_JOB,
                         budget_s=max(1.0, budget_s - (time.perf_counter() - t0)),
                         replay_units=units)
    pace.save(results, chosen)
    return chosen
