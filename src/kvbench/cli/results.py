"""`kvbench compare` and `kvbench report`: arms side by side, and the offline dashboard."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format


@app.command()
def compare(
    result_dirs: Annotated[list[Path], typer.Argument(help="Result dirs or result.json files.")],
    by: Annotated[str, typer.Option(
        help="Compare the values of this field (kv_offloading, conc, framework, tp, "
             "backend, ...); results pair when every other identity field agrees.")
    ] = "kv_offloading",
    a: Annotated[str | None, typer.Option(
        "--a", help="Baseline selection KEY=VALUE[,KEY=VALUE] (with --b; overrides --by).")
    ] = None,
    b: Annotated[str | None, typer.Option("--b", help="Other selection, as --a.")] = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    valid_only: Annotated[bool, typer.Option(
        "--valid-only", help="Leave out runs whose validity stamp says not valid (each named "
                             "below its table), so an arm's valid repeats give a verdict.")
    ] = False,
) -> None:
    """Print arms side by side with deltas, and whether each delta exceeds run-to-run noise."""
    from kvbench.errors import ResultError
    from kvbench.results import compare as do_compare
    from kvbench.results import load_results, parse_selection

    check_format(format, ("table", "json"), ResultError)
    out = do_compare(load_results(result_dirs), by=by,
                     a=parse_selection(a) if a is not None else None,
                     b=parse_selection(b) if b is not None else None, valid_only=valid_only)
    if format == "json":
        from kvbench.files import print_json

        print_json(out)
        return
    _print_tables(out)


def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"


def _short(arm: str, by_mode: bool) -> str:
    return arm.partition("=")[2] if by_mode else arm


VERDICT_STYLE = {"better": "green", "worse": "red", "within noise": "yellow",
                 "offload not exercised": "yellow", "not valid": "red", "too few runs": "dim",
                 "partial": "dim"}


def _validity_cell(v: dict) -> str:
    if not v["stamped"]:
        return "[dim]unknown[/]"
    text = f"{v['valid']}/{v['n']}"
    if v["valid"] == v["n"]:
        return f"[green]{text} valid[/]"
    return f"[red]{text} valid[/] ⚑ " + ", ".join(v["flags"] or ["see reasons"])


def _submission_cell(s: dict | None) -> str:
    """A validity profile's verdict (AgentX): valid submissions of the arm's runs, and the
    first reason when not all are."""
    if not s:
        return "[dim]not judged[/]"
    text = f"{s['valid']}/{s['n']} {s['profile']}"
    if s["valid"] == s["n"]:
        return f"[green]{text}[/]"
    first = s["reasons"][0].split(": ", 1)[0] if s["reasons"] else "see reasons"
    return f"[red]{text}[/] ⚑ {first}"


def _delta_cell(d: dict, row: dict) -> str:
    """The delta in its row's one unit: percentage points for a hit rate, % of the first arm
    otherwise (the metric's own unit where the first arm's mean is zero)."""
    if d["pct"] is not None:
        text = f"{d['pct']:+.1f} %"
        if d.get("noise_pct") is not None:
            text += f" ±{d['noise_pct']:.1f}"
        return text
    if d["abs"] is None:
        return "–"
    if row.get("share"):
        text = f"{100 * d['abs']:+.1f} pp"
        return text + (f" ±{100 * d['noise']:.1f}" if d.get("noise") is not None else "")
    unit = f" {row['metric_unit']}" if row.get("metric_unit") else ""
    text = f"{d['abs']:+.3g}{unit}"
    return text + (f" ±{d['noise']:.2g}" if d.get("noise") is not None else "")


def _arm_cell(s: dict, row: dict, partial: list[int] | None) -> str:
    """An arm's mean ±sd (a hit rate in %), and the runs it is over when not all of them."""
    k = 100.0 if row.get("share") else 1.0
    mean = None if s["mean"] is None else s["mean"] * k
    std = f" ±{_fmt(s['std'] * k)}" if s["std"] is not None else ""
    text = f"{_fmt(mean)}{' %' if row.get('share') and mean is not None else ''}{std}"
    return text + (f" [dim]({partial[0]} of {partial[1]} runs)[/]" if partial else "")


def _print_tables(out: dict) -> None:
    from rich.table import Table

    from kvbench.cli.console import table_console

    console = table_console()
    if not out["cells"]:
        console.print(f"no pairs to compare across {', '.join(out['arms'])} "
                      f"({out['unpaired_cells']} configuration(s) with a single arm)")
        if out.get("options_ids"):
            named = out.get("options") or {}
            console.print("the arms ran with other run options (" + "; ".join(
                f"options_id {i}: {named.get(i, 'options ' + i)}" for i in out["options_ids"])
                + "); to compare them anyway, name each arm's in --a/--b "
                "(--a kv_offloading=none,options_id=ID --b ...)")
        return
    by_mode = len(out["compared"]) <= 2 and all("," not in a for a in out["arms"])
    keys = [k for k in out["cells"][0]["key"] if k != "options_id"]
    common = {k: out["cells"][0]["key"][k] for k in keys
              if len({c["key"][k] for c in out["cells"]}) == 1}
    console.print("[bold]comparing[/] " + " vs ".join(out["arms"]))
    # the sessions' digest is said only where it tells tables apart
    console.print("[dim]common: " + " ".join(f"{k}={v}" for k, v in common.items()
                                             if k != "sessions") + "[/]")
    options = out.get("options") or {}
    if options:  # several run-option sets: each table says which, by what differs
        console.print(f"[yellow]{len(options)} sets of run options, compared apart:[/] "
                      + "; ".join(sorted(options.values())))
    reasons: dict[str, dict[str, str]] = {}  # check -> where -> its first reason
    for cell in out["cells"]:
        varying = " ".join(f"{k}={v}" for k, v in cell["key"].items()
                           if k not in common and k != "options_id")
        if options:
            varying = f"{varying} [{options.get(cell['key']['options_id'], 'options ?')}]"
        table = Table(title=varying or None, title_justify="left", title_style="bold")
        table.add_column("metric")
        for arm in cell["arms"]:
            table.add_column(f"{_short(arm, by_mode)} (n={len(cell['runs'][arm])})",
                             justify="right")
        for arm in cell["arms"][1:]:
            table.add_column(f"Δ {_short(arm, by_mode)} ±95%", justify="right")
            table.add_column("verdict")
        validity = cell.get("validity") or {}
        if validity:
            vals = [_validity_cell(validity[arm]) for arm in cell["arms"]]
            table.add_row("valid", *vals, *[""] * (2 * (len(cell["arms"]) - 1)))
            from kvbench.results.reuse import inferencex_line, reuse_line, shares_differ

            reuse = cell.get("cache_reuse") or {}
            if any(reuse.get(arm) for arm in cell["arms"]):
                table.add_row("prompt tokens from", *[reuse_line(reuse.get(arm))
                                                      for arm in cell["arms"]],
                              *[""] * (2 * (len(cell["arms"]) - 1)))
            ix = cell.get("inferencex_share") or {}
            if any(shares_differ(reuse.get(arm), ix.get(arm)) for arm in cell["arms"]):
                # InferenceX's own accounting (metrics/inferencex.py), beside kvbench's
                table.add_row("InferenceX draws", *[inferencex_line(ix.get(arm))
                                                    for arm in cell["arms"]],
                              *[""] * (2 * (len(cell["arms"]) - 1)))
            if any(validity[arm].get("submission") for arm in cell["arms"]):
                table.add_row("submission", *[_submission_cell(validity[arm].get("submission"))
                                              for arm in cell["arms"]],
                              *[""] * (2 * (len(cell["arms"]) - 1)))
            for arm in cell["arms"]:
                for why in validity[arm]["reasons"]:
                    check, _, detail = why.partition(": ")
                    reasons.setdefault(check, {}).setdefault(
                        f"{varying} {_short(arm, by_mode)}".strip(), detail)
        for row in cell["metrics"]:
            vals = [_arm_cell(row["arms"][arm], row, (row.get("partial") or {}).get(arm))
                    for arm in cell["arms"]]
            for arm in cell["arms"][1:]:
                d = row["deltas"][arm]
                vals.append(_delta_cell(d, row))
                style = VERDICT_STYLE.get(d["verdict"])
                vals.append(f"[{style}]{d['verdict']}[/]" if style else d["verdict"])
            table.add_row(row["metric"], *vals)
        console.print(table)
        for arm, names in (cell.get("left_out") or {}).items():
            console.print(f"[yellow]left out of {_short(arm, by_mode)} (not valid, "
                          f"--valid-only):[/] {', '.join(names)}")
    console.print("[dim]arm cells: mean ±sd over repeats (hit rates: % of prompt tokens); "
                  "Δ: difference of the means ±95% interval, in % of the first arm (hit "
                  "rates: percentage points, pp); better/worse: the interval excludes zero "
                  "(significant); within noise: it does not; too few runs: an arm has fewer "
                  "than 2 runs, so there is no interval; partial: some runs of an arm lack "
                  "the metric, so the arms are not over the same runs; offload not "
                  "exercised: host tier never hit and equal hit rates, so the delta is no "
                  "offload effect; not valid: an arm has runs that are not valid (⚑ below), "
                  "so the delta is no verdict[/]")
    for check, where in sorted(reasons.items()):
        example = next(iter(where.values()))
        console.print(f"[red]⚑ {check}[/] in {len(where)} arm cell(s) "
                      f"[dim]({'; '.join(sorted(where))})[/], e.g. {example}")
    if out["unpaired_cells"]:
        console.print(f"[dim]{out['unpaired_cells']} configuration(s) had only one arm and "
                      "are not shown[/]")


@app.command()
def report(
    result_dirs: Annotated[list[Path], typer.Argument(help="Result dirs or result.json files.")],
    # a str, not a Path: Path("out/") drops the slash that says "a directory" (refused)
    out: Annotated[str, typer.Option("-o", "--out", help="HTML file to write (- for stdout).")
                   ] = "dashboard.html",
) -> None:
    """Write one self-contained offline HTML dashboard of the results."""
    from kvbench.report import write_dashboard

    path = write_dashboard(result_dirs, out)
    if str(out) == "-":
        return
    size = f" ({path.stat().st_size / 1e6:.1f} MB)" if path.is_file() else ""
    print(f"wrote {path}{size}")


@app.command()
def rescore(
    result_dirs: Annotated[list[Path], typer.Argument(
        help="Job directories, or results directories holding them.")],
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the new verdicts; write nothing.")] = False,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Derive each job's result.json again from its raw files (replay summary, /metrics
    scrape, plan) with this kvbench's adapters and checks; the run's own result is kept as
    result.orig.json."""
    from kvbench.errors import KvbenchError, ResultError
    from kvbench.results import find_results
    from kvbench.results.build import options_digest
    from kvbench.results.rescore import rescore as do_rescore
    from kvbench.results.rescore import rescore_job
    from kvbench.sweep.spec import job_absent_cached_tokens_are_zero, job_run_options

    check_format(format, ("table", "json"), ResultError)
    rows = []
    failed: list[str] = []
    # a directory named twice (`rescore R R/job`, a symlinked copy) is one job, rescored once
    found = list({p.parent.resolve(): p for p in reversed(find_results(result_dirs))
                  }.values())[::-1]
    if not found:
        raise ResultError(f"nothing to rescore: no result.json under "
                          f"{', '.join(map(str, result_dirs))}",
                          hint="give a results directory of kvbench run, or a job directory")
    claimed: dict[tuple, Path] = {}  # (fingerprint, repeat) -> the job directory holding it
    for path in found:
        identity = job_run_options(path.parent)
        try:
            owner = _run_owner(path, claimed)
            if owner is not None:
                raise ResultError(f"{path.parent}: holds the same run (fingerprint and "
                                  f"repeat) as {owner}; not rescored, so neither run's "
                                  "original is taken for the other's",
                                  hint="keep one of the two directories")
            old, new = (rescore_job if dry_run else do_rescore)(
                path.parent, options_id=None if identity is None else options_digest(identity),
                absent_cached_tokens_are_zero=job_absent_cached_tokens_are_zero(path.parent),
                run_options=identity)
        except KvbenchError as e:
            failed.append(e.message)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            # raw files that parse but hold the wrong shapes (a list where a map belongs)
            failed.append(f"{path.parent}: corrupt job files ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]})")
        else:
            rows.append({"job": str(path.parent), "status": [old.get("status"), new.status],
                         "valid": [(old.get("validity") or {}).get("valid"),
                                   new.validity["valid"]],
                         "reasons": new.validity["reasons"]})
            continue
        print(f"error: {failed[-1]}", file=sys.stderr)  # named now; the others go on
    if format == "json":
        from kvbench.files import print_json

        print_json(rows)
        _rescore_failures(failed, len(found))
        return
    from rich.table import Table

    from kvbench.cli.console import table_console

    table = Table(title=f"{len(rows)} result(s) {'would be ' if dry_run else ''}rescored")
    for col in ("job", "status", "valid", "reasons"):
        table.add_column(col)
    for r in rows:
        table.add_row(Path(r["job"]).name, " -> ".join(map(str, r["status"])),
                      " -> ".join("unknown" if v is None else str(v) for v in r["valid"]),
                      "; ".join(r["reasons"]) or "-")
    table_console().print(table)
    _rescore_failures(failed, len(found))


def _run_owner(path: Path, claimed: dict[tuple, Path]) -> Path | None:
    """The job directory that already claimed the run `path` holds (its result's fingerprint
    and repeat), or None after claiming it."""
    import orjson

    from kvbench.files import read_bounded
    from kvbench.results.store import MAX_RESULT_BYTES

    try:
        doc = orjson.loads(read_bounded(path, MAX_RESULT_BYTES, "result file"))
    except Exception:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("fingerprint"), str):
        return None
    key = (doc["fingerprint"], str(doc.get("repeat") or 0))
    if key in claimed:
        return claimed[key]
    claimed[key] = path.parent
    return None


def _rescore_failures(failed: list[str], total: int) -> None:
    from kvbench.errors import ResultError

    if failed:
        raise ResultError(f"{len(failed)} of {total} job(s) not rescored (each named above)",
                          hint="fix or remove their files and rescore again")
