"""The body of `kvbench launch`: building launch specs for a selection, printing them, and
running one server. Imported only when the command runs."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvbench.engines import LaunchSpec, get_adapter
from kvbench.errors import EngineError, KvbenchError, LaunchError
from kvbench.files import json_text, path_part, write_atomic, write_json_atomic
from kvbench.launch import REDACTED, ServerProcess, redact_argv, redact_env
from kvbench.matrix import Job, select_jobs
from kvbench.matrix.selection import Selection
from kvbench.plan.image import describe
from kvbench.recipe.layout import srt_recipe_path


@dataclass(slots=True)
class Built:
    job: Job
    spec: LaunchSpec
    plan_json: dict | None
    work_dir: Path
    srt_recipe: tuple[str, Path | None] | None = None  # the row's, and where it lies


def build_all(selection: Selection, *, engine: str | None, exp_names: list[str] | None,
              port: int, host: str, model_path: str | None, overrides: list[str],
              env_overrides: dict[str, str], engine_version: str | None,
              accuracy: bool | None, work_dir: Path | None, dummy_weights: bool = False,
              sizing: str = "launcher", force: bool = False
              ) -> tuple[list[Built], list[tuple[Job, str]]]:
    from kvbench.matrix.generate import selection_runners
    from kvbench.plan import plan_job

    jobs = select_jobs(selection)
    if exp_names:
        known = {j.exp_name for j in jobs}
        missing = [n for n in exp_names if n not in known]
        if missing:
            raise EngineError(f"--exp-name {', '.join(missing)}: not in the selection",
                              hint="kvbench launch --dry-run lists the selected exp-names")
        jobs = [j for j in jobs if j.exp_name in exp_names]
    runners = selection_runners(selection)
    built, skipped = [], []
    for job in jobs:
        try:
            adapter = get_adapter(engine or job.framework, multinode=job.is_multinode)
            plan = plan_job(job, runners, sizing=sizing, force=force, engine_args=overrides)
            job_dir = (work_dir or Path("kvbench-launch") / path_part(job.exp_name)).absolute()
            spec = adapter.build(job, plan, port=port, host=host, model_path=model_path,
                                 work_dir=job_dir, overrides=overrides,
                                 env_overrides=env_overrides, accuracy=accuracy,
                                 dummy_weights=dummy_weights,
                                 engine_version=engine_version, runners=runners)
        except KvbenchError as e:
            skipped.append((job, e.message.splitlines()[0]))
            continue
        built.append(Built(job, spec, plan.to_json(), job_dir,
                           srt_recipe_path(job.row, job.config_file)))
    if not built and skipped:
        raise EngineError(f"none of the {len(skipped)} selected jobs can be launched; first: "
                          f"{skipped[0][0].exp_name}: {skipped[0][1]}")
    return built, skipped


ROW_IDENTITY = ("tp", "ep", "dp-attn", "conc", "spec-decoding", "kv-offloading")


def _job_json(b: Built, explain: bool) -> dict:
    out = b.spec.to_json(exp_name=b.job.exp_name, config_key=b.job.config_key)
    if b.srt_recipe is not None:
        name, path = b.srt_recipe
        out["srt-recipe"] = {"name": name, "path": str(path) if path else None}
    # exp-names do not say ep or DP attention (dsv4_tp8_conc32 is a TP and a DEP row)
    out["row"] = {k: b.job.row.get(k) for k in ROW_IDENTITY}
    out["argv"] = redact_argv(out["argv"])
    out["env"] = redact_env(out["env"])
    for w in out.get("workers", []):
        w["argv"], w["env"] = redact_argv(w["argv"]), redact_env(w["env"])
    if out["router-argv"] is not None:
        out["router-argv"] = redact_argv(out["router-argv"])
    if explain:
        out["sources"] = [_redacted_source(s.model_dump()) for s in b.spec.sources]
        for w, spec in zip(out.get("workers", []), b.spec.workers, strict=True):
            w["sources"] = [_redacted_source(s.model_dump()) for s in spec.sources]
    return out


def _redacted_source(src: dict) -> dict:
    if src["kind"] == "env" and redact_env({src["flag"]: src["value"] or ""})[src["flag"]] \
            == REDACTED:
        src["value"] = REDACTED
    return src


def print_json(built: list[Built], skipped: list[tuple[Job, str]], explain: bool) -> None:
    print(json_text([_job_json(b, explain) for b in built]))
    for job, why in skipped:
        print(f"skipped {job.exp_name} ({job.config_key}): {why}", file=sys.stderr)


def _shell(argv: list[str]) -> str:
    """A copy-pasteable multi-line command: one flag (with its value) per line."""
    lines, current = [], []
    for tok in argv:
        if tok.startswith("--") and current:
            lines.append(shlex.join(current))
            current = []
        current.append(tok)
    if current:
        lines.append(shlex.join(current))
    return " \\\n    ".join(lines)


def print_text(built: list[Built], skipped: list[tuple[Job, str]], explain: bool) -> None:
    out = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
    for b in built:
        spec = b.spec
        out.rule(f"[bold]{escape(b.job.exp_name)}[/]  {escape(b.job.config_key)}  "
                 f"[dim]{spec.engine}[/]")
        env = redact_env(spec.env)
        if env:
            out.print("[bold]env[/]")
            for k, v in env.items():
                out.print(f"  {k}={escape(shlex.quote(v))}")
        for service in spec.services:  # started before the engine, stopped after it
            out.print(f"[bold]service[/] {escape(service.name)} (ready: {service.ready_url})")
            out.print(escape(_shell(redact_argv(service.argv))), soft_wrap=True)
        for w in spec.workers:  # disaggregated: every server, then the router in argv
            nodes = ", ".join(map(str, w.nodes))
            out.print(f"[bold]{w.role} {w.index}[/] (node {nodes}, {escape(w.url)})")
            for k, v in redact_env(w.env).items():
                out.print(f"  {k}={escape(shlex.quote(v))}")
            out.print(escape(_shell(redact_argv(w.argv))), soft_wrap=True)
        out.print("[bold]router argv[/]" if spec.workers else "[bold]argv[/]")
        if spec.argv:
            out.print(escape(_shell(redact_argv(spec.argv))), soft_wrap=True)
        else:  # an srt-slurm recipe behind vLLM's own server: no front process
            out.print(f"(none: the first worker serves {escape(spec.base_url)})")
        if spec.router_argv:
            out.print("[bold]router argv[/]")
            out.print(escape(_shell(redact_argv(spec.router_argv))), soft_wrap=True)
        for name, content in spec.files.items():
            out.print(f"[bold]file[/] {escape(str(b.work_dir / name))}")
            out.print(escape(content.rstrip()), soft_wrap=True)
        out.print(f"[bold]client[/] {spec.base_url}  [bold]metrics[/] {spec.metrics_url}"
                  + (f"  [bold]session header[/] {spec.correlation_header}"
                     if spec.correlation_header else ""))
        for owner, mods in [("", spec.image_mods)] + [(f"{w.role} {w.index}: ", w.image_mods)
                                                       for w in spec.workers[:1]]:
            for m in mods:  # the workers of a recipe share its modifications: the first's
                out.print(f"[bold]image mod[/] {escape(owner)}{escape(m['id'])}: "
                          f"{escape(describe(m))} -> {escape(m['action'])} "
                          f"[dim]({escape(m['source'])})[/]")
        if b.srt_recipe is not None:
            out.print(f"[bold]srt-recipe[/] {escape(_srt_line(b.srt_recipe))}")
        for w in spec.warnings:
            out.print(f"[yellow]warning:[/] {escape(w)}")
        if explain:
            out.print(_sources_table(spec))
    for job, why in skipped:
        out.print(f"[yellow]skipped[/] {escape(job.exp_name)} ({escape(job.config_key)}): "
                  f"{escape(why)}")
    out.print(f"[dim]{len(built)} jobs, {len(skipped)} skipped[/]")


def _srt_line(recipe: tuple[str, Path | None]) -> str:
    """The row's srt-slurm recipe: InferenceX's launcher runs it; kvbench launches from the
    row itself and shows where the recipe is, to compare."""
    name, path = recipe
    if path is None:
        return (f"{name} (not in this checkout: InferenceX's srt-slurm launcher takes it from "
                "its runtime image; kvbench launches from the row)")
    return f"{path} (InferenceX's srt-slurm launch recipe; kvbench launches from the row)"


def _sources_table(spec: LaunchSpec) -> Table:
    table = Table(title="where each value comes from", title_justify="left")
    for col in ("kind", "name", "value", "source", "detail / replaced"):
        table.add_column(col, overflow="fold")
    for s in spec.sources:
        src = _redacted_source(s.model_dump())
        detail = s.detail + "".join(f"\n  replaced {x}" for x in s.shadowed)
        table.add_row(s.kind, s.flag, escape(str(src["value"] if src["value"] is not None
                                                 else "(flag)")),
                      s.source, escape(detail))
    return table


def run_server(b: Built, *, ready_timeout_s: float, grace_s: float, follow_log: bool,
               skip_image_mods: tuple[str, ...] = ()) -> None:
    """Start one job's server (and router), print its URLs, keep it up until Ctrl-C."""
    err = Console(stderr=True, highlight=False)
    b.work_dir.mkdir(parents=True, exist_ok=True)
    for name, content in b.spec.files.items():
        write_atomic(b.work_dir / name, content)
    if b.plan_json is not None:
        write_json_atomic(b.work_dir / "plan.json", b.plan_json)
    spec = b.spec
    echo = (lambda line: err.print(f"[dim]{escape(line)}[/]")) if follow_log else None
    log = b.work_dir / "server.log"
    err.print(f"starting {spec.engine} for {b.job.exp_name}; log {log}")
    with ServerProcess.for_spec(spec, log_path=log, ready_timeout_s=ready_timeout_s,
                                cwd=b.work_dir, grace_s=grace_s, on_log_line=echo,
                                patches=spec.image_mods,
                                skip_patches=skip_image_mods) as server:
        for patch in server.patch_outcomes:
            print(f"image mod {patch['id']} ({patch['kind']}): {patch['status']}"
                  + (f" ({patch['file']})" if patch.get("file") else ""), flush=True)
        took = server.wait_ready()
        print(f"ready after {took:.1f} s", flush=True)
        print(f"  base url:    {spec.base_url}")
        print(f"  metrics:     {spec.metrics_url}")
        print(f"  health:      {spec.health_url}")
        print(f"  model:       {spec.served_model_name}")
        if spec.correlation_header:
            print(f"  session header: {spec.correlation_header}")
        print("Ctrl-C or SIGTERM stops the server and everything it started (a script that "
              "put kvbench in the background: SIGINT is ignored there, send TERM).", flush=True)
        while True:
            code = server.poll()
            if code is not None:
                from kvbench.launch import read_tail

                tail = "\n".join(f"    {x}" for x in read_tail(log, 15))
                raise LaunchError(f"{spec.engine} exited with code {code} while serving\n"
                                  f"  last lines of {log}:\n{tail}")
            time.sleep(1.0)
