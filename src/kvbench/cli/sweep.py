"""`kvbench run`, `kvbench run-job` and `kvbench quickstart`: sweeps end to end."""

# No `from __future__ import annotations` here: `with_selection` re-wraps `run`, and typer
# would then evaluate string annotations in selection.py's namespace, where `_opt` is unknown.

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.launch import split_engine_args
from kvbench.cli.selection import SelectionCommand, selected_jobs, with_selection
from kvbench.errors import SweepError, SweepOptionError
from kvbench.matrix.selection import Selection

_RUN = "Run"


@contextlib.contextmanager
def _interruptible(what: str):
    """Ctrl-C / SIGTERM end the command with exit code 130 and a resume hint. (typer turns a
    KeyboardInterrupt into a *returned* 130 in non-standalone mode, which main() ignores.)"""
    try:
        yield
    except KeyboardInterrupt:
        print(f"interrupted: {what}", file=sys.stderr)
        raise SystemExit(130) from None
_WORK = "Workload"
_SLURM = "Slurm executor"


def _opt(help: str, panel: str = _RUN, *names: str):
    return typer.Option(*names, help=help, rich_help_panel=panel)


@app.command(cls=SelectionCommand)
@with_selection
def run(
    selection: Selection,
    recipes: Annotated[list[Path] | None, typer.Argument(
        help="Master config YAML files (added to --config-files).")] = None,
    results: Annotated[Path, _opt("Results directory (one subdirectory per job).")] = Path(
        "kvbench-results"),
    executor: Annotated[str, _opt("local (sequential here) or slurm (one job array).")] = "local",
    emit: Annotated[str | None, _opt("Print instead of running: github-matrix.")] = None,
    emit_dir: Annotated[Path | None, _opt(
        "--emit github-matrix: write each job's spec here and print matrices of at most 256 "
        "jobs naming them (GitHub's limits; docs/sweeps.md).")] = None,
    repeat: Annotated[int, _opt("Run every job this many times (noise estimates).")] = 1,
    continue_on_error: Annotated[bool, _opt("Keep going past failed jobs; report all at "
                                            "the end.")] = False,
    rerun_failed: Annotated[bool, _opt("On resume, run again jobs whose result says failed.")
                            ] = True,
    dashboard: Annotated[bool, _opt("Write dashboard.html into the results directory.")] = True,
    trace: Annotated[list[Path] | None, _opt(
        "Trace files or directories (default: the bundled Claude Code sessions).", _WORK)] = None,
    synthetic: Annotated[bool, _opt("Synthetic sessions instead of traces.", _WORK)] = False,
    duration: Annotated[float | None, _opt("Seconds of replay per job (default: the row's "
                                           "duration unless --max-requests).", _WORK)] = None,
    max_requests: Annotated[int | None, _opt("Profiled requests per job.", _WORK)] = None,
    warmup_requests: Annotated[int, _opt("Warm-up requests per job.", _WORK)] = 0,
    seed: Annotated[int, _opt("Workload seed.", _WORK)] = 0,
    profile: Annotated[str | None, _opt(
        "Validity profile: agentx (InferenceX AgentX v1.0: its replay settings where these "
        "options keep their defaults, and a submission verdict in each result; the default "
        "for rows with an InferenceX exp-name) or none (kvbench's own replay settings; the "
        "default for the embedded engine's rows).", _WORK)] = None,
    think_time_scale: Annotated[float, _opt("Multiply trace think times.", _WORK)] = 1.0,
    max_input_tokens: Annotated[int | None, _opt("Skip turns with longer prompts.", _WORK)
                                ] = None,
    max_tokens_cap: Annotated[int | None, _opt("Cap output tokens per request.", _WORK)] = None,
    tokenizer: Annotated[str | None, _opt("Tokenizer for prompt synthesis.", _WORK)] = None,
    engine_arg: Annotated[list[str] | None, _opt("Extra argument appended to the engine argv "
                                                 "(repeatable).", _WORK)] = None,
    time_scale: Annotated[float | None, _opt("Embedded engine only: a wall clock this many "
                                             "times faster than wall time instead of its "
                                             "virtual clock.", _WORK)] = None,
    model_path: Annotated[str | None, _opt("Local model weights path for the engine.", _WORK)
                          ] = None,
    load_format: Annotated[str, _opt("auto (the model's weights) or dummy (its shape with "
                                     "random weights; --model-path from `kvbench "
                                     "dummy-model`).", _WORK)] = "auto",
    compress: Annotated[bool, _opt("Write records.jsonl.gz and scrape.jsonl.gz (long runs; "
                                   "compare, report and rescore read either).", _WORK)] = False,
    sizing: Annotated[str, _opt("Host pools: launcher (default: the InferenceX launcher's "
                                "arithmetic, refused only where it oversubscribes the row's "
                                "DRAM budget, unless --force) or budget (sized from the "
                                "budget less kvbench's headroom).", _WORK)] = "launcher",
    force: Annotated[bool, _opt("Launcher sizing: run the launcher's size even where it "
                                "oversubscribes the budget.", _WORK)] = False,
    skip_image_mod: Annotated[list[str] | None, _opt(
        "An image modification (id, see kvbench launch --dry-run) the image already carries: "
        "not applied, recorded as skipped-by-user. Repeatable.", _WORK)] = None,
    replay_workers: Annotated[int, _opt("Processes each job's replay shards its lanes over "
                                        "(at most its concurrency): past ~1,000 paced "
                                        "streams one event loop falls behind.", _WORK)] = 1,
    stand_in: Annotated[str | None, _opt(
        "sim: every worker's real command line is checked by its engine's own parser, then "
        "the embedded engine serves in its place (multi-node sglang-disagg rows without "
        "their hardware).", _WORK)] = None,
    ready_timeout: Annotated[float, _opt("Seconds for a server to become ready.")] = 1800.0,
    replay_timeout: Annotated[float | None, _opt("Seconds for one job's replay (default: "
                                                 "the profile's warm-up grace + duration + "
                                                 "grace + 5 min).")] = None,
    partition: Annotated[str | None, _opt("sbatch --partition.", _SLURM)] = None,
    account: Annotated[str | None, _opt("sbatch --account.", _SLURM)] = None,
    time_limit: Annotated[str | None, _opt("sbatch --time (e.g. 08:00:00).", _SLURM)] = None,
    max_parallel: Annotated[int | None, _opt("At most this many array tasks at once.", _SLURM)
                            ] = None,
    sbatch_arg: Annotated[list[str] | None, _opt("Extra #SBATCH line (repeatable).", _SLURM)
                          ] = None,
    spread_workers: Annotated[bool, _opt(
        "Multi-node rows of the embedded engine: a node per worker (default: all on one "
        "node; GPU workers always get nodes of their own).", _SLURM)] = False,
    format: Annotated[str, _opt("Final report: table or json (outcomes on stdout).")] = "table",
    exp_name: Annotated[list[str] | None, _opt(
        "Keep only jobs with these exp-names (one arm of a config key).")] = None,
) -> None:
    """Run a sweep: for each selected job plan, launch, replay with scraping, stop, and write
    result.json. Rerunning the same command resumes: finished jobs are skipped."""
    from kvbench.sweep import PhaseTimeouts, RunOptions

    if recipes:
        selection = dataclasses.replace(
            selection, config_files=tuple(recipes) + tuple(selection.config_files))
    if not selection.config_files:
        raise SweepOptionError("no recipe given", hint="kvbench run RECIPE.yaml --results DIR")
    engine_args = split_engine_args(engine_arg)  # as `launch` splits them
    if time_scale is not None and time_scale <= 0:
        raise SweepOptionError(f"--time-scale {time_scale:g}: allowed: > 0 (times faster than wall "
                         "time)")
    if max_parallel is not None and max_parallel < 1:
        raise SweepOptionError(f"--max-parallel {max_parallel}: allowed: >= 1")
    if repeat < 1:
        raise SweepOptionError(f"--repeat {repeat}: allowed: >= 1")
    if time_scale is not None:  # the embedded engine on a wall clock, instead of its virtual
        engine_args += ["--clock", "wall", "--time-scale", str(time_scale)]
    if synthetic and trace:
        raise SweepOptionError("give --trace or --synthetic, not both")
    if profile is not None:
        from kvbench.replay.profile import profile_choice

        profile = profile_choice(profile)  # an unknown name fails before any job starts
    if load_format not in ("auto", "dummy"):
        raise SweepOptionError(f"--load-format {load_format!r} is not one of auto, dummy")
    from kvbench.plan.launcher_sizing import check_mode

    check_mode(sizing, force)
    if stand_in not in (None, "sim"):
        raise SweepOptionError(f"--stand-in {stand_in!r} is not allowed (allowed: sim)")
    if load_format == "dummy" and model_path is None:
        raise SweepOptionError("--load-format dummy needs --model-path",
                         hint="kvbench dummy-model DIR --model qwen3-8b builds one")
    from pydantic import ValidationError

    try:
        options = RunOptions(
            trace=list(trace) if trace else None, bundled_traces=not synthetic and not trace,
            duration_s=duration, max_requests=max_requests,
            warmup_requests=warmup_requests, seed=seed, tokenizer=tokenizer, profile=profile,
            max_tokens_cap=max_tokens_cap, max_input_tokens=max_input_tokens,
            think_time_scale=think_time_scale, engine_args=engine_args, model_path=model_path,
            load_format=load_format, compress_raw=compress, sizing=sizing, force=force,
            skip_image_mods=tuple(skip_image_mod or ()),
            replay_workers=replay_workers,
            stand_in=stand_in,
            timeouts=PhaseTimeouts(ready_s=ready_timeout, replay_s=replay_timeout),
        )
    except ValidationError as e:
        raise _option_error(e) from None
    with _interruptible("rerun the same command to resume"):
        run_sweep(selection, options, results=results, executor=executor, emit=emit,
                  emit_dir=emit_dir, repeat=repeat, continue_on_error=continue_on_error,
                  rerun_failed=rerun_failed, dashboard=dashboard, format=format,
                  exp_names=exp_name,
                  slurm={"partition": partition, "account": account, "time_limit": time_limit,
                         "max_parallel": max_parallel, "sbatch_args": list(sbatch_arg or []),
                         "spread_cpu_workers": spread_workers})


# RunOptions / PhaseTimeouts fields -> the `kvbench run` flag that sets them
_RUN_FLAGS = {"duration_s": "--duration", "max_requests": "--max-requests",
              "warmup_requests": "--warmup-requests", "max_tokens_cap": "--max-tokens-cap",
              "max_input_tokens": "--max-input-tokens", "think_time_scale": "--think-time-scale",
              "ready_s": "--ready-timeout", "replay_s": "--replay-timeout", "seed": "--seed",
              "tokenizer": "--tokenizer", "model_path": "--model-path", "trace": "--trace",
              "replay_workers": "--replay-workers"}


def _option_error(e) -> SweepOptionError:
    """A RunOptions/PhaseTimeouts ValidationError as one line naming the flag."""
    err = e.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else ""
    flag = _RUN_FLAGS.get(field, field.replace("_", "-"))
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    return SweepOptionError(f"{flag} {err.get('input')!r}: {msg}", hint="see `kvbench run --help`")


def run_sweep(selection: Selection, options, *, results: Path, executor: str = "local",
              emit: str | None = None, repeat: int = 1, continue_on_error: bool = False,
              rerun_failed: bool = True, dashboard: bool = True, format: str = "table",
              slurm: dict | None = None, exp_names: list[str] | None = None,
              final_report: bool = True, announce_resume: bool = True,
              emit_dir: Path | None = None, earlier: list | None = None) -> list:
    """The body of `kvbench run` (also used by `kvbench quickstart`, which runs its first
    pass without the final report and says itself that it resumed). `earlier`: outcomes of
    jobs this same invocation already ran (the quickstart's pace probe), reported as run, not
    as resumed."""

    from kvbench.matrix.generate import runner_config_path
    from kvbench.sweep import SlurmExecutor, build_specs, failures_error, run_local

    if executor not in ("local", "slurm"):
        raise SweepOptionError(f"--executor {executor!r} is not one of local, slurm")
    if emit not in (None, "github-matrix"):
        raise SweepOptionError(f"--emit {emit!r} is not one of github-matrix")
    if emit_dir is not None and emit is None:
        raise SweepOptionError("--emit-dir goes with --emit github-matrix")
    check_format(format, ("table", "json"), SweepOptionError)
    jobs = selected_jobs(selection, SweepError)
    if exp_names:
        missing = sorted(set(exp_names) - {j.exp_name for j in jobs})
        if missing:
            raise SweepOptionError(f"--exp-name {', '.join(missing)}: not in the selection",
                                   hint="kvbench plan lists the selected exp-names")
        jobs = [j for j in jobs if j.exp_name in exp_names]
    real = sorted({j.framework for j in jobs if j.framework != "sim"})
    if options.stand_in is not None:
        from kvbench.sweep.multinode import STAND_IN_FRAMEWORKS

        other = sorted({j.framework for j in jobs if not j.is_multinode}
                       | ({j.framework for j in jobs} - set(STAND_IN_FRAMEWORKS)))
        if other:
            raise SweepOptionError(
                f"--stand-in {options.stand_in} runs the multi-node rows of "
                f"{', '.join(STAND_IN_FRAMEWORKS)}; the selection also has {', '.join(other)} jobs",
                hint="select --multi-node --framework "
                + " --framework ".join(STAND_IN_FRAMEWORKS))
        real = []  # the embedded engine serves every worker: its --time-scale applies
    if "--time-scale" in options.engine_args and real:
        raise SweepOptionError(f"--time-scale is for the embedded engine only; the selection "
                               f"also has {', '.join(real)} jobs", hint="select --framework sim")
    from kvbench.sweep.quickstart import embedded_defaults

    bounded = embedded_defaults(jobs, options)
    if bounded is not None:
        print(f"embedded engine only and no --duration/--max-requests: "
              f"{bounded.max_requests} requests per job, think time x"
              f"{bounded.think_time_scale:g}, output cap {bounded.max_tokens_cap} (the "
              "quickstart's workload)", file=sys.stderr)
        options = bounded
    if emit is None and executor == "local":  # what this machine must have to run them
        from kvbench.sweep.multinode import check_router_installed

        check_router_installed(jobs)
    if emit == "github-matrix":
        from kvbench.sweep.emit import emit_github_matrix

        specs = build_specs(jobs, options, repeats=repeat,
                            runner_config=runner_config_path(selection))
        # refused (beyond GitHub's limits) before anything is said about the jobs
        text = emit_github_matrix(specs, checkout=Path.cwd(), emit_dir=emit_dir)
        for line in _profile_lines(specs, options):
            print(line, file=sys.stderr)
        sys.stdout.write(text + "\n")
        return []
    results = Path(results)
    from kvbench.sweep.lock import results_lock

    with results_lock(results):
        # named under the lock: a directory another job's files hold is not this job's
        specs = build_specs(jobs, options, repeats=repeat,
                            runner_config=runner_config_path(selection), results=results)
        _banner(specs, options, results, executor, announce_resume)
        for line in _profile_lines(specs, options):
            print(line, file=sys.stderr)
        if executor == "slurm":
            from rich.console import Console

            err = Console(stderr=True)
            last: list[int] = [-1]

            def on_poll(done: int, total: int) -> None:
                if done != last[0]:
                    last[0] = done
                    err.print(f"slurm: {done}/{total} array tasks finished", highlight=False)

            ex = SlurmExecutor(**(slurm or {}))
            outcomes = ex.run(specs, results, rerun_failed=rerun_failed, on_poll=on_poll)
        else:
            outcomes = run_local(specs, results, continue_on_error=continue_on_error,
                                 rerun_failed=rerun_failed)
    ran = {o.dir_name: o for o in earlier or ()}
    outcomes = [ran.get(o.dir_name, o) if o.status == "skipped" else o for o in outcomes]
    mine = [results / s.dir_name for s in specs]
    if format == "json":
        from kvbench.files import print_json

        print_json([o.to_json() for o in outcomes])
    elif final_report:
        _final_report(results, outcomes, dashboard, mine)
    if len(outcomes) < len(specs):
        print(f"stopped at the first failure: {len(specs) - len(outcomes)} job(s) not run "
              f"(--continue-on-error goes on past failures)", file=sys.stderr)
    if format == "json" and dashboard and final_report:
        _write_dashboard(results, mine)
    if (error := failures_error(outcomes)) is not None:
        raise error
    return outcomes


def _banner(specs: list, options, results: Path, executor: str,
            announce_resume: bool = True) -> None:
    """What is about to run, so an hour-long default duration is never a surprise; on a
    rerun, that it resumes and how to start afresh."""
    from kvbench.sweep.layout import resumed_line

    done = sum(1 for s in specs if s.done_in(results))
    if done and announce_resume:
        print(resumed_line(results, done, len(specs)), file=sys.stderr)
    if stale := sum(1 for s in specs if s.stale_in(results)):
        print(f"{stale} result(s) in {results} are of these jobs' options but of other "
              "sessions than their traces load as now (another kvbench read them, or "
              "recorded none): run again", file=sys.stderr)
    if options.max_requests is not None:
        per_job = f"{options.max_requests} requests"
    elif options.duration_s is not None:
        per_job = f"{options.duration_s:g} s"
    else:
        durations = sorted({int(s.row.get("duration", 0)) for s in specs})
        per_job = f"{'/'.join(map(str, durations))} s (the rows' duration)"
    workload = ("bundled Claude Code sessions" if options.bundled_traces else
                f"{len(options.trace)} trace path(s)" if options.trace else "synthetic sessions")
    print(f"{len(specs)} jobs ({done} done already) -> {results} [{executor}]; replay per job: "
          f"{per_job} of {workload}", file=sys.stderr)


def _profile_lines(specs: list, options) -> list[str]:
    """What the validity profile means for this sweep, said once: that the rows with an
    InferenceX exp-name replay the AgentX workload by default (and how to opt out), and what
    keeps every job from being an AgentX submission (the run goes ahead: the verdict in each
    result says it again). Nothing when no job replays under a profile."""
    from kvbench.plan.topology import EMBEDDED_FRAMEWORK as EMBEDDED
    from kvbench.replay.profile import profile_named
    from kvbench.workload.identity import corpus_name

    first = [s for s in specs if s.repeat == 0]
    profiled = [s for s in first if s.options.profile_name is not None]
    if not profiled:
        return []
    profile = profile_named(profiled[0].options.profile_name)
    lines = []
    if options.profile is None:
        lines.append(
            f"{len(profiled)} of {len(first)} jobs carry an InferenceX exp-name and replay the "
            f"AgentX workload as InferenceX publishes it ({profile.name}: the harness's "
            f"warm-up, then the row's profiling phase, subagents alongside their parent, seed "
            f"{profile.seed}); --profile none replays them without it")
    why = []
    if options.max_requests is not None:
        why.append(f"--max-requests {options.max_requests} bounds requests, where AgentX "
                   f"profiles for a duration of at least {profile.min_duration_s:g} s")
    else:
        short = sorted({d for s in profiled if (d := s.options.replay_workload(
            1, float(s.row.get("duration", 0)))["duration_s"]) < profile.min_duration_s})
        if short:
            what = (f"--duration {options.duration_s:g} s" if options.duration_s is not None
                    else f"the rows' duration {'/'.join(f'{d:g}' for d in short)} s")
            why.append(f"{what} is below AgentX's {profile.min_duration_s:g} s minimum "
                       "profiling phase")
    if corpus_name(options.trace_paths(), None) is None:
        why.append("the " + ("bundled Claude Code sessions are" if options.bundled_traces
                             else "traces are" if options.trace else "synthetic sessions are")
                   + " no AgentX corpus")
    embedded = sum(1 for s in profiled if EMBEDDED in (s.row.get("framework"),
                                                       s.options.stand_in))
    if embedded:
        why.append("kvbench's embedded engine serves " + (
            "them (a simulation)" if embedded == len(profiled) else
            f"{embedded} of them (simulations)"))
    if why:
        lines.append(f"{profile.name}: {'; '.join(why)}: the jobs run, and no result "
                     "this applies to is an AgentX submission")
    return lines


def _write_dashboard(results: Path, dirs: list[Path]) -> Path | None:
    """The dashboard of this sweep's jobs (`dirs`), in the results directory."""
    from kvbench.errors import KvbenchError
    from kvbench.report import write_dashboard

    try:
        return write_dashboard([d for d in dirs if d.is_dir()], results / "dashboard.html",
                               owned=True)
    except KvbenchError as e:  # a dashboard problem must not hide the sweep's outcome
        print(f"dashboard not written: {e.message}", file=sys.stderr)
        return None


def _final_report(results: Path, outcomes: list, dashboard: bool, dirs: list[Path]) -> None:
    """The sweep's outcome, its comparison and dashboard: of this sweep's jobs (`dirs`)
    only, so results of other runs in the same directory never mix in silently."""
    from rich.console import Console

    from kvbench.cli.results import compare as compare_command
    from kvbench.errors import KvbenchError
    from kvbench.results.store import find_results

    out = Console()
    ok = [o for o in outcomes if o.status in ("ok", "skipped")]
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("ok", "skipped", "failed")}
    out.print(f"\n[bold]{len(outcomes)} jobs[/]: {counts['ok']} ran, {counts['skipped']} "
              f"resumed (already done), {counts['failed']} failed", highlight=False)
    mine = {p.resolve() for d in dirs if d.is_dir() for p in find_results([d])}
    others = [p for p in find_results([results]) if p.resolve() not in mine]
    if others:
        out.print(f"{results} also holds {len(others)} result(s) of other runs (e.g. "
                  f"{others[0].parent.relative_to(results)}): the table and the dashboard "
                  f"below are this run's {len(mine)}; kvbench compare {results} shows them "
                  "all", highlight=False, soft_wrap=True)
    if ok and mine:
        try:
            compare_command(sorted(mine), by="kv_offloading", a=None, b=None, format="table")
        except KvbenchError as e:  # e.g. a single arm: nothing to compare
            out.print(f"no comparison table: {e.message}", highlight=False)
    if dashboard:
        path = _write_dashboard(results, dirs)
        if path is not None:
            out.print(f"dashboard: [bold]{path.resolve()}[/]", highlight=False, soft_wrap=True)


@app.command("run-job")
def run_job_command(
    job_file: Annotated[Path | None, typer.Option(help="A job.json written by kvbench run.")
                        ] = None,
    job_json: Annotated[str | None, typer.Option(help="The job spec as a JSON string (CI "
                                                      "matrix entries carry it).")] = None,
    results: Annotated[Path, typer.Option(help="Results directory.")] = Path("kvbench-results"),
    force: Annotated[bool, typer.Option(help="Run even if a result with this fingerprint "
                                             "exists.")] = False,
) -> None:
    """Run one job (what each Slurm array task and CI matrix job does)."""
    from kvbench.sweep import JobSpec, run_job
    from kvbench.sweep.layout import RESULT_FILE
    from kvbench.sweep.local import _sigterm_as_interrupt

    if (job_file is None) == (job_json is None):
        raise SweepOptionError("give exactly one of --job-file or --job-json")
    if job_file is not None:
        spec = JobSpec.read(job_file)
    else:
        from pydantic import ValidationError

        from kvbench.errors import validation_message

        try:
            spec = JobSpec.model_validate_json(job_json)
        except ValidationError as e:
            raise SweepOptionError(validation_message(
                e, "--job-json is not a valid job spec")) from None
    job_dir = results / spec.dir_name
    if not force and spec.done_in(results):
        print(f"{spec.dir_name}: done already ({job_dir / RESULT_FILE})")
        return
    _sigterm_as_interrupt()
    with _interruptible(f"job {spec.dir_name} stopped; no result written"):
        outcome = run_job(spec, results)
    print(f"{spec.dir_name}: {outcome.status}"
          + (f" at {outcome.phase}: {outcome.reason}" if outcome.status == "failed" else "")
          + f" ({outcome.elapsed_s:.1f} s)")
    if outcome.status == "failed":
        raise SweepError(f"job {spec.dir_name} failed at {outcome.phase}: {outcome.reason}")


@app.command()
def quickstart(
    results: Annotated[Path, typer.Option(help="Results directory.")] = Path(
        "kvbench-results/quickstart"),
    time_scale: Annotated[float | None, typer.Option(
        help="Run the embedded engine on a wall clock this many times faster than wall time "
             "instead of its virtual clock (runs where the client falls behind are then "
             "flagged client-saturated)")] = None,
    repeats: Annotated[int | None, typer.Option(
        help="Runs per point: deltas come with their noise from these (default: 3, or as "
             "many as fit the minute after the first pass, at least 2; printed)")] = None,
    placement: Annotated[bool, typer.Option(
        help="Keep the client and the engine to the cores other work leaves idle, at a "
             "higher priority where allowed (printed)")] = True,
) -> None:
    """Run the embedded-engine quickstart: resident vs HiCache host offload on real Claude
    Code sessions, then print the comparison and the dashboard path (no GPU needed)."""
    from kvbench.sweep.quickstart import quickstart_run

    if time_scale is not None and not time_scale > 0:
        raise SweepOptionError(f"--time-scale {time_scale:g}: allowed: > 0 (times faster "
                               "than wall time), or none for the virtual clock")
    if repeats is not None and repeats < 1:
        raise SweepOptionError(f"--repeats {repeats}: allowed: at least 1")
    with _interruptible("rerun kvbench quickstart to resume"):
        quickstart_run(results, time_scale=time_scale, run_sweep=run_sweep, repeats=repeats,
                       placement=placement)
