"""The command line: the one error boundary of kvbench.

Command modules import only typer and kvbench's light modules at import time; each command
imports what it needs inside its body so that `kvbench --help` stays fast."""

from __future__ import annotations

import sys

from kvbench.cli.app import app
from kvbench.errors import KvbenchError

# Each module attaches its commands to `app` on import.
from kvbench.cli import (  # noqa: F401  isort: skip
    changelog,
    launch,
    plan,
    recipe,
    replay,
    results,
    sim,
    sweep,
)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn kvbench errors into a clear message and an exit code."""
    try:
        app(args=argv, standalone_mode=False)
    except KvbenchError as e:
        from rich.console import Console

        err = Console(stderr=True)
        err.print(f"[bold red]error:[/] {e.message}", highlight=False, markup=True)
        for line in getattr(e, "errors", [])[1:] if getattr(e, "errors", None) else []:
            err.print(f"  {line}", highlight=False, markup=False)
        if e.hint:
            err.print(f"[yellow]hint:[/] {e.hint}", highlight=False)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click's usage errors arrive here in non-standalone mode
        import click

        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            print("aborted", file=sys.stderr)
            sys.exit(130)
        raise
