"""`kvbench quickstart`: the examples/quickstart.yaml sweep on the embedded engine, sized to
finish in about a minute on two CPU cores with one of them busy, then the comparison and the
dashboard.

The engine runs on its virtual clock (sim/lockstep.py): its time moves only while every lane
of the client has a request in it, so a slow or busy machine makes the sweep longer, never a
timing wrong, and the same workload gives the same numbers anywhere. The recipe is chosen so
that every point it shows exercises the host tier (Qwen3-32B fp8 on one H100 leaves ~130K
tokens of GPU KV: three Claude Code sessions side by side already spill to host DRAM), and
each repeat of a point replays the sessions in another order (seed = repeat), so a delta's
interval says how much the answer depends on which sessions ran together. Repeats: three,
or as many as fit the minute after the first pass, at least two (sweep/pace.py)."""

from __future__ import annotations

import sys
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
# the wall time of a job on the virtual clock is a second or two: scrape often enough for a
# timeline (the engine's clock at each scrape is its x axis)
SCRAPE_INTERVAL_S = 0.1
REPEATS = 3  # a delta needs a noise estimate: three runs per point where the minute allows
# the quickstart's minute (issue 15; issue 39: under 75 s on two cores, one of them busy),
# less the comparison and the dashboard at its end
BUDGET_S = 55.0
READY_TIMEOUT_S = 60.0
REPLAY_TIMEOUT_S = 120.0


def embedded_defaults(jobs: Sequence, options: RunOptions) -> RunOptions | None:
    """`kvbench run` on embedded-engine rows only, with no workload bound given: the
    quickstart's workload instead of the rows' hour (the reference's default for GPUs), so
    `kvbench run examples/quickstart.yaml` runs what the quickstart runs. None when a job is
    not the embedded engine's or the user bounded the run. Whatever emits the same jobs'
    matrix calls it too, so fingerprints agree. (The clock comes with the engine:
    engines/data/sim.yaml.)"""
    if not jobs or any(j.framework != "sim" for j in jobs):
        return None
    if options.duration_s is not None or options.max_requests is not None:
        return None
    update: dict = {"max_requests": MAX_REQUESTS_PER_JOB, "scrape_interval_s": SCRAPE_INTERVAL_S,
                    "order": "shuffled"}
    if options.think_time_scale == 1.0:
        update["think_time_scale"] = 0.0
    if options.max_tokens_cap is None:
        update["max_tokens_cap"] = MAX_TOKENS_CAP
    return options.model_copy(update=update)


def quickstart_options(time_scale: float | None = None) -> RunOptions:
    """The quickstart's run options: its engine's virtual clock, or with `time_scale` a wall
    clock that many times faster than wall time."""
    engine_args = ([] if time_scale is None else
                   ["--clock", "wall", "--time-scale", f"{time_scale:g}"])
    # Think times are dropped: the comparison is about the KV a turn finds, and a wall clock
    # at 50x would still spend a second on each 60 s pause.
    return RunOptions(
        bundled_traces=True, max_requests=MAX_REQUESTS_PER_JOB, think_time_scale=0.0,
        max_tokens_cap=MAX_TOKENS_CAP, order="shuffled", scrape_interval_s=SCRAPE_INTERVAL_S,
        engine_args=engine_args,
        timeouts=PhaseTimeouts(ready_s=READY_TIMEOUT_S, replay_s=REPLAY_TIMEOUT_S),
    )


def quickstart_run(results: Path, *, time_scale: float | None, run_sweep: Callable,
                   recipe: Path = RECIPE, repeats: int | None = None,
                   budget_s: float = BUDGET_S, placement: bool = True) -> list:
    """The quickstart sweep. `repeats` None: REPEATS, or as many as fit `budget_s` after the
    first pass (at least two), chosen once per results directory. `placement`: the client
    and engine first move to the idle cores (sweep/placement.py)."""
    from kvbench.matrix.selection import Selection
    from kvbench.sweep import pace

    t0 = time.perf_counter()
    if not recipe.is_file():
        raise SweepError(f"the quickstart recipe is not at {recipe}",
                         hint="run from a source checkout: pip install -e . && kvbench quickstart")
    if not bundled_traces():
        raise SweepError("the bundled Claude Code traces are missing from the installation")
    results = Path(results)
    from kvbench.results.store import find_results
    from kvbench.sweep.layout import resumed_line

    if results.is_dir() and (earlier := find_results([results])):
        print(resumed_line(results, len(earlier)), file=sys.stderr)
    selection = Selection(config_files=(recipe,), runner_config=recipe.parent / "runners.yaml")
    if placement:
        from kvbench.sweep.placement import place

        print(place().line(), file=sys.stderr)
    print("clock: " + ("virtual: the engine's time moves only while every lane of the client "
                       "has a request in it, so its pace is the client's and no timing is the "
                       "client's lag (sim/lockstep.py)" if time_scale is None else
                       f"wall, {time_scale:g}x (--time-scale): runs where the client falls "
                       "behind are flagged client-saturated"), file=sys.stderr)
    options = quickstart_options(time_scale)
    if repeats is not None:
        return run_sweep(selection, options, results=results, continue_on_error=True,
                         repeat=repeats, announce_resume=False)
    chosen, probe = pace.saved(results), None
    if chosen is None:
        first = time.perf_counter()
        probe = run_sweep(selection, options, results=results, continue_on_error=True,
                          repeat=1, final_report=False, announce_resume=False)
        now = time.perf_counter()
        chosen = pace.choose(pass_s=now - first, elapsed_s=now - t0, wanted=REPEATS,
                             budget_s=budget_s, jobs=len(probe))
        pace.save(results, chosen)
    else:
        chosen = pace.Pace(chosen.repeats, f"{chosen.reason} (chosen by the first run of "
                                           f"{results})")
    print(chosen.line(), file=sys.stderr)
    return run_sweep(selection, options, results=results, continue_on_error=True,
                     repeat=chosen.repeats, announce_resume=False, earlier=probe)
