"""`kvbench matrix` without typer: the command CI calls most, on its own short path
(cli/fast.py reads its flags; the typer command calls the same `run_matrix`). The matrix
itself, on a warm parse cache (recipe/cache.py), is 0.03 s."""

from __future__ import annotations

import sys

from kvbench.matrix.selection import Selection

# matrix's own flags beside the selection's (cli/fast.py's table format); --output stays a
# str: "out/" names a directory
MATRIX_FLAGS = (("format", "str?", None), ("output", "str?", None))


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
