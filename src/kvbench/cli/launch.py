"""`kvbench launch`: the exact server command line of each selected job (`--dry-run`), or one
job's server run until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.errors import EngineError
from kvbench.matrix.selection import Selection


# Annotations are resolved in kvbench.cli.selection's namespace (with_selection wraps the
# command), so they may use only names it has: typer, Annotated, Path.
@app.command(cls=SelectionCommand)
@with_selection
def launch(
    selection: Selection,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print argv, environment (secrets redacted) and files of every "
        "selected job; start nothing.")] = False,
    format: Annotated[str, typer.Option(
        "--format", help="text (default) or json: an array of {exp-name, config-key, argv, "
        "env, files, router-argv, ...}.")] = "text",
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show where each value comes from (job, plan, override, default) "
        "and what it replaced.")] = False,
    engine: Annotated[str | None, typer.Option(
        "--engine", help="Engine adapter instead of the row's framework (sim runs any row on "
        "the embedded engine).")] = None,
    exp_name: Annotated[list[str] | None, typer.Option(
        "--exp-name", help="Keep only jobs with these exp-names.")] = None,
    port: Annotated[int, typer.Option(
        "--port", help="Port the client talks to (the router's when there is one).")] = 30000,
    host: Annotated[str, typer.Option("--host", help="Address servers bind to.")] = "127.0.0.1",
    model_path: Annotated[str | None, typer.Option(
        "--model-path", help="Local model directory instead of the row's HF id.")] = None,
    load_format: Annotated[str, typer.Option(
        "--load-format", help="auto (the model's weights) or dummy (its shape with random "
        "weights; --model-path a directory from `kvbench dummy-model`).")] = "auto",
    engine_arg: Annotated[list[str] | None, typer.Option(
        "--engine-arg", help="Extra or replacing engine flags, e.g. "
        "--engine-arg '--watchdog-timeout 3600'.")] = None,
    engine_env: Annotated[list[str] | None, typer.Option(
        "--engine-env", help="Extra environment, NAME=VALUE.")] = None,
    engine_version: Annotated[str | None, typer.Option(
        "--engine-version", help="Engine version whose flag spellings to use (default: from "
        "the row's image tag).")] = None,
    accuracy: Annotated[bool, typer.Option(
        "--accuracy", help="Accuracy run: no synthetic speculative acceptance.")] = False,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Where config files, logs and command.json go (default "
        "./kvbench-launch/<exp-name>).")] = None,
    ready_timeout: Annotated[float, typer.Option(
        "--ready-timeout", help="Seconds to wait for readiness.")] = 3600.0,
    grace: Annotated[float, typer.Option(
        "--grace", help="Seconds between TERM and KILL at teardown.")] = 30.0,
    follow_log: Annotated[bool, typer.Option(
        "--follow-log", help="Echo the server log while waiting.")] = False,
    sizing: Annotated[str, typer.Option(
        "--sizing", help="Host pools: launcher (default: the InferenceX launcher's own "
        "arithmetic, refused only where it oversubscribes the row's DRAM budget, unless "
        "--force) or budget (sized from the row's DRAM budget less kvbench's headroom).")
    ] = "launcher",
    force: Annotated[bool, typer.Option(
        "--force", help="Launcher sizing: start the launcher's size even where it "
        "oversubscribes the budget.")] = False,
    skip_image_mod: Annotated[list[str] | None, typer.Option(
        "--skip-image-mod", help="An image modification (id, see --dry-run) the image "
        "already carries: not applied, recorded as skipped-by-user. Repeatable.")] = None,
) -> None:
    """Build each selected job's server command line from its row and plan; with --dry-run
    print it, otherwise start the one selected job's server and keep it up until Ctrl-C."""
    from kvbench.cli.launch_render import build_all, print_json, print_text, run_server
    from kvbench.errors import EngineError

    if format not in ("text", "json"):
        raise EngineError(f"--format {format!r} is not allowed (allowed: text, json)")
    if load_format not in ("auto", "dummy"):
        raise EngineError(f"--load-format {load_format!r} is not allowed (allowed: auto, dummy)")
    env_overrides = {}
    for item in engine_env or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EngineError(f"--engine-env {item!r}: expected NAME=VALUE")
        env_overrides[name] = value
    from kvbench.plan.launcher_sizing import check_mode

    check_mode(sizing, force)
    overrides = split_engine_args(engine_arg)
    built, skipped = build_all(
        selection, engine=engine, exp_names=exp_name, port=port, host=host,
        model_path=model_path, overrides=overrides, env_overrides=env_overrides,
        engine_version=engine_version, accuracy=accuracy or None, work_dir=work_dir,
        dummy_weights=load_format == "dummy", sizing=sizing, force=force,
    )
    if dry_run:
        if format == "json":
            print_json(built, skipped, explain)
        else:
            print_text(built, skipped, explain)
        return
    if len(built) != 1:
        names = ", ".join(b.job.exp_name for b in built[:8])
        raise EngineError(
            f"launch without --dry-run starts one server; {len(built)} jobs are selected"
            + (f" ({names}{', ...' if len(built) > 8 else ''})" if built else ""),
            hint="narrow the selection, e.g. --exp-name NAME (see --dry-run for the names)",
        )
    if built[0].spec.workers:
        raise EngineError(
            f"{built[0].job.exp_name}: a disaggregated row runs {len(built[0].spec.workers)} "
            f"servers on {built[0].spec.nodes} nodes; kvbench launch starts one server here",
            hint="--dry-run prints every worker's command line and plan")
    refused = built[0].plan_json and built[0].plan_json.get("errors")
    if refused:
        from kvbench.errors import PlanError

        launcher = built[0].plan_json.get("sizing") == "launcher"
        raise PlanError(f"{built[0].job.exp_name}: the plan refuses this job: {refused[0]}",
                        hint="kvbench plan --details shows the arithmetic; " + (
                            "--force starts the launcher's size anyway, --sizing budget "
                            "sizes the pools from the budget" if launcher else
                            "lower the row's dram-utilization or change its offload "
                            "backend"))
    try:
        run_server(built[0], ready_timeout_s=ready_timeout, grace_s=grace,
                   follow_log=follow_log, skip_image_mods=_known_mods(built[0], skip_image_mod))
    except KeyboardInterrupt:
        # The server tree is already down (ServerProcess.__exit__). typer turns a
        # KeyboardInterrupt into a *returned* 130 in non-standalone mode, which main()
        # drops, so leave with the conventional status ourselves.
        import sys

        print("interrupted: server stopped", file=sys.stderr)
        sys.exit(130)


def split_engine_args(args: list[str] | None) -> list[str]:
    """`--engine-arg '--watchdog-timeout 3600'` is two argv tokens, shell-split (launch and
    run alike); unbalanced quotes are a usage error, not a traceback. A value that is not a
    flag (`--engine-arg --api-key --engine-arg 'Bearer X'`, a header `Authorization: Bearer
    X`) keeps its grouping: the engine receives it as the one token it was given."""
    import shlex

    out: list[str] = []
    for arg in args or []:
        if not arg.lstrip().startswith("-"):
            out.append(arg)
            continue
        try:
            out.extend(shlex.split(arg))
        except ValueError as e:
            raise EngineError(f"--engine-arg {arg!r}: {e}",
                              hint="quote the whole flag and value once, e.g. "
                              "--engine-arg '--chat-template \"x y\"'") from None
    return out


def _known_mods(built: object, ids: list[str] | None) -> tuple[str, ...]:
    """--skip-image-mod ids, each one the row gets (a typo would skip nothing, silently)."""
    from kvbench.errors import EngineError

    spec = built.spec  # type: ignore[attr-defined]
    have = {m["id"] for m in spec.image_mods} | {m["id"] for w in spec.workers
                                                 for m in w.image_mods}
    bad = [i for i in ids or () if i not in have]
    if bad:
        raise EngineError(f"--skip-image-mod {', '.join(bad)}: not a modification of this row "
                          f"(allowed: {', '.join(sorted(have)) or 'none'})")
    return tuple(ids or ())
