"""The command line: the one error boundary of kvbench.

Command modules import only typer and kvbench's light modules at import time; each command
imports what it needs inside its body. The commands run most (`--help`, `version`, `matrix`,
`validate`, `plan`) take a typer-free short path first (cli/fast.py)."""

from __future__ import annotations

import functools
import sys
from typing import Any

from kvbench.errors import KvbenchError

# The command modules, in pipeline order (as --help lists them); each attaches its commands
# to the typer app on import.
COMMAND_MODULES = ("recipe", "mirror", "plan", "model", "launch", "replay", "sim",
                   "simulate_jobs", "capacity", "sweep", "results", "export", "changelog",
                   "calibrate")


def _typer_app() -> Any:
    import importlib

    from kvbench.cli.app import app

    for name in COMMAND_MODULES:
        importlib.import_module(f"kvbench.cli.{name}")
    # The command list shows each docstring's first paragraph as one line, not its breaks.
    for cmd in app.registered_commands:
        doc = cmd.help or (cmd.callback.__doc__ if cmd.callback else None) or ""
        cmd.short_help = cmd.short_help or " ".join(doc.split("\n\n")[0].split())
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole typer app, every command attached
        return _typer_app()
    raise AttributeError(f"module 'kvbench.cli' has no attribute {name!r}")


def _escape(text: str) -> str:
    from rich.markup import escape

    from kvbench.redaction import redact_text

    # an error may quote a URL with credentials or an api_key= query: never print it
    return escape(redact_text(text))


def _redact(text: str) -> str:
    from kvbench.redaction import redact_text

    return redact_text(text)


def _report(message: str, hint: str | None, errors: list[str] | None = None) -> None:
    from rich.console import Console

    err = Console(stderr=True, soft_wrap=True)
    # Messages carry YAML paths like `search-space[2]`: never let rich read them as markup.
    err.print(f"[bold red]error:[/] {_escape(message)}", highlight=False)
    errors = errors or []
    for line in errors[1:] if errors and errors[0] == message else errors:
        err.print(f"  {_redact(line)}", highlight=False, markup=False)
    if hint:
        err.print(f"[yellow]hint:[/] {_escape(hint)}", highlight=False)


@functools.cache
def _command():
    """The click command of `app`, built once (typer takes about 0.3 s to build it) with the
    finite-value check on every parameter."""
    import typer.main

    from kvbench.cli.values import harden

    return harden(typer.main.get_command(_typer_app()))


# A writer whose reader went away (`kvbench matrix | head`) ends silently with status 1, as
# click ends every other command then (click 8 core.py, BaseCommand.main: EPIPE -> exit 1)
BROKEN_PIPE_EXIT = 1


def _quiet_broken_pipe() -> None:
    """Exit without a word when stdout's reader closed it. Python would also fail to flush
    stdout at exit ("Exception ignored ... BrokenPipeError"): stdout goes to /dev/null first
    (the Python documentation's recipe, signal module, "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no real file (a test's capture)
        pass
    sys.exit(BROKEN_PIPE_EXIT)


def main(argv: list[str] | None = None, *, fast: bool = True) -> None:
    """Run the CLI; turn kvbench errors into a clear message and an exit code. `fast=False`
    sends every command through typer (the reference the short paths are tested against)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if fast:
            from kvbench.cli.fast import try_fast

            if try_fast(args):
                return
        code = _command().main(args=args, prog_name="kvbench", standalone_mode=False)
        # typer returns (not raises) 130 on Ctrl-C when not in standalone mode
        if isinstance(code, int) and code:
            if code == 130:
                print("interrupted", file=sys.stderr)
            sys.exit(code)
    except KvbenchError as e:
        _report(e.message, e.hint, getattr(e, "errors", None))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except BrokenPipeError:  # `kvbench matrix | head`: the reader has what it wanted
        _quiet_broken_pipe()
    except OSError as e:  # a path the system refuses (too long, a loop, no permission)
        from kvbench.errors import shown

        where = f" {shown(e.filename, 80)}" if e.filename else ""
        _report(f"cannot access{where}: {e.strerror or e}", "check the path given")
        sys.exit(2)
    except Exception as e:  # click's usage errors arrive here in non-standalone mode
        from kvbench.cli import usage

        if usage.is_exit(e):
            sys.exit(getattr(e, "exit_code", 0))
        if usage.is_abort(e):
            print("aborted", file=sys.stderr)
            sys.exit(130)
        if usage.is_help_request(e):
            e.show()
            sys.exit(2)
        problem = usage.usage_error(e, list(sys.argv[1:] if argv is None else argv))
        if problem is None:
            raise
        _report(problem.message, problem.hint)
        sys.exit(2)
