"""The command line: the one error boundary of kvbench.

Command modules import only typer and kvbench's light modules at import time; each command
imports what it needs inside its body so that `kvbench --help` stays fast."""

from __future__ import annotations

import sys

from kvbench.cli.app import app
from kvbench.errors import KvbenchError

# Each module attaches its commands to `app` on import, in pipeline order (as --help lists).
from kvbench.cli import (  # noqa: F401  isort: skip
    recipe,
    mirror,
    plan,
    model,
    launch,
    replay,
    sim,
    capacity,
    sweep,
    results,
    changelog,
    calibrate,
)


# The command list shows each docstring's first paragraph as one line, not its line breaks.
for _cmd in app.registered_commands:
    _doc = _cmd.help or (_cmd.callback.__doc__ if _cmd.callback else None) or ""
    _cmd.short_help = _cmd.short_help or " ".join(_doc.split("\n\n")[0].split())


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn kvbench errors into a clear message and an exit code."""
    try:
        code = app(args=argv, standalone_mode=False)
        # typer returns (not raises) 130 on Ctrl-C when not in standalone mode
        if isinstance(code, int) and code:
            sys.exit(code)
    except KvbenchError as e:
        from rich.console import Console

        err = Console(stderr=True, soft_wrap=True)
        # Messages carry YAML paths like `search-space[2]`: never let rich read them as markup.
        err.print(f"[bold red]error:[/] {_escape(e.message)}", highlight=False)
        errors = getattr(e, "errors", None) or []
        for line in errors[1:] if errors and errors[0] == e.message else errors:
            err.print(f"  {line}", highlight=False, markup=False)
        if e.hint:
            err.print(f"[yellow]hint:[/] {_escape(e.hint)}", highlight=False)
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
