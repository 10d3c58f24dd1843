"""`kvbench matrix` without typer: the command CI calls most, on its own short path.

Typer converts parameters through pydantic (typer/_adapters.py imports it), which with typer
and rich is about 0.3 s of CPU before any work; the matrix itself, on a warm parse cache
(recipe/cache.py), is 0.03 s. So `main` first offers the arguments to `try_matrix`, which
reads the same flag table as the typer command (cli/flags.py) and hands anything it does not
fully understand (--help, an unknown flag, a bad number) back to typer, whose messages and
exit codes stay the reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kvbench.bounds import option_range
from kvbench.cli.flags import (
    BOTH_SCENARIOS,
    SELECTION_FLAGS,
    selection_from,
    spread_multi_values,
)
from kvbench.matrix.selection import Selection

_BY_FLAG = {"--" + name.replace("_", "-"): (name, kind) for name, kind, _, _ in SELECTION_FLAGS}
_OWN = {"--format": "format", "--output": "output"}


def parse(args: list[str]) -> dict[str, Any] | None:
    """The matrix command's parameters from its arguments, or None to let typer decide."""
    values: dict[str, Any] = {name: default for name, _, default, _ in SELECTION_FLAGS}
    values.update(format=None, output=None)
    it = iter(spread_multi_values(args))
    for arg in it:
        flag, eq, inline = arg.partition("=")
        if flag in _OWN:
            value = inline if eq else next(it, None)
            if value is None:
                return None
            values[_OWN[flag]] = value  # --output stays a str: "out/" names a directory
            continue
        if flag not in _BY_FLAG:
            return None  # --help, a positional, a typo: typer's answer
        name, kind = _BY_FLAG[flag]
        if kind == "bool":
            if eq:
                return None
            values[name] = True
            continue
        value = inline if eq else next(it, None)
        if value is None:
            return None
        if kind in ("paths", "strs"):
            values[name] = [*(values[name] or []), Path(value) if kind == "paths" else value]
        elif kind == "ints":
            try:
                number = int(value)
            except ValueError:
                return None
            bound = option_range("matrix", flag)
            if bound is not None and bound.problem(number) is not None:
                return None  # typer's usage line names the range
            values[name] = [*(values[name] or []), number]
        elif kind in ("int", "int?"):
            try:
                values[name] = int(value)
            except ValueError:
                return None
            bound = option_range("matrix", flag)
            if bound is not None and bound.problem(values[name]) is not None:
                return None  # typer's usage line names the range
        else:
            values[name] = Path(value) if kind == "path?" else value
    return values


def try_matrix(argv: list[str]) -> bool:
    """Run `matrix ARGS` here when the arguments are plain; False: typer's turn."""
    if not argv or argv[0] != "matrix":
        return False
    values = parse(argv[1:])
    if values is None:
        return False
    fmt, output = values.pop("format"), values.pop("output")
    run_matrix(selection_from(values, scenarios=BOTH_SCENARIOS), fmt, output)
    return True


def run_matrix(selection: Selection, format: str | None, output: str | None) -> None:
    """The matrix command's work: rows as JSON (stdout, and atomically to `output`), or a
    table of counts per config key."""
    import json

    from kvbench.errors import MatrixError
    from kvbench.matrix.generate import keyed_rows

    chosen = format or ("table" if sys.stdout.isatty() else "json")
    if chosen not in ("json", "table"):
        raise MatrixError(f"--format {chosen!r} is not allowed (allowed: json, table)")
    keyed = keyed_rows(selection)
    text = json.dumps([row for _, row in keyed])
    if output is not None:
        from kvbench.files import write_output

        write_output(output, text + "\n")
    if chosen == "json":
        print(text)
    else:
        _print_table(keyed)


def _print_table(keyed: list[tuple[str, dict]]) -> None:
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    counts: Counter[tuple[str, str]] = Counter()
    meta: dict[tuple[str, str], dict] = {}
    for key, row in keyed:
        scenario = row.get("scenario-type", "fixed-seq-len")
        counts[(key, scenario)] += 1
        info = meta.setdefault((key, scenario), {
            "nodes": "multi" if "prefill" in row else "single", "offload": Counter()})
        backend = row.get("kv-offload-backend")
        info["offload"][backend["name"] if backend else "none"] += 1
    table = Table(title=f"{len(keyed)} rows from {len({k for k, _ in counts})} config keys")
    table.add_column("config key", no_wrap=True)
    for column in ("scenario", "nodes", "offload"):
        table.add_column(column)
    table.add_column("rows", justify="right")
    for (key, scenario), n in counts.items():
        info = meta[(key, scenario)]
        offload = " ".join(f"{name}:{c}" for name, c in info["offload"].items())
        table.add_row(key, scenario, info["nodes"],
                      offload if scenario == "agentic-coding" else "", str(n))
    Console().print(table)
