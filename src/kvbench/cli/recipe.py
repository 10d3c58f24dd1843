"""`kvbench validate` and `kvbench matrix`: recipes in, job rows out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.flags import BOTH_SCENARIOS
from kvbench.cli.selection import SelectionCommand, with_selection
from kvbench.matrix.selection import Selection


@app.command()
def validate(
    files: Annotated[list[Path] | None, typer.Argument(
        help="Master config and runners YAML files, or configs/ folders (default: the "
             "checkout's, in either layout).")] = None,
) -> None:
    """Check master configs and runners files; print every error of every file at once."""
    from kvbench.cli.validate_fast import run_validate

    run_validate(list(files or ()))


@app.command(cls=SelectionCommand)
@with_selection(scenarios=BOTH_SCENARIOS)
def matrix(
    selection: Selection,
    format: Annotated[
        str | None,
        typer.Option(help="json (rows on stdout, as the reference) or table. "
                          "Default: table on a terminal, json otherwise."),
    ] = None,
    output: Annotated[
        str | None,  # not a Path: Path("out/") drops the slash that names a directory
        typer.Option(help="Also write the JSON rows to this file (atomically), e.g. jobs.json."),
    ] = None,
) -> None:
    """Expand recipes into job rows, exactly like the InferenceX generator: its full-sweep, or
    with --config-keys its test-config. Both scenarios unless --scenario-type says (the
    commands that plan or run jobs default to agentic-coding)."""
    from kvbench.cli.matrix_fast import run_matrix

    run_matrix(selection, format, output)
