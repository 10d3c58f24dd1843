"""`kvbench plan`'s work, without typer: the short path (cli/fast.py) and the typer command
(cli/plan.py) both call `run_plan`."""

from __future__ import annotations

from kvbench.matrix.selection import Selection

# plan's own flags beside the selection's (cli/fast.py's table format); --predict and its
# options are the typer command's alone (the prediction imports the simulator anyway)
PLAN_FLAGS = (("format", "str", "table"), ("details", "bool", False),
              ("host_headroom_gb", "float?", None), ("trust_runner_dram", "bool", False),
              ("sizing", "str", "launcher"), ("force", "bool", False))

_GB = 1_000_000_000


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


def run_plan(selection: Selection, *, format: str, details: bool,
             host_headroom_gb: float | None, trust_runner_dram: bool, sizing: str,
             force: bool) -> None:
    """Plan every selected job; print the plans as JSON or a table; refuse (exit 2) when
    none can run."""
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
        from kvbench.files import print_json

        print_json([_with_workers(job, p, runners) for job, p in zip(jobs, plans, strict=True)])
    else:
        _print_table(jobs, plans, details)
    if plans and not any(p.accepted for p in plans):
        # printed in full above; the exit status says that nothing here can run
        raise PlanError(f"every one of the {len(plans)} selected plans is refused",
                        hint="--details shows each one's arithmetic"
                        + ("; --force runs a launcher's size anyway"
                           if any(p.sizing == "launcher" for p in plans) else ""))
