"""The commands run most, without typer: `--help` (and no arguments), `version`, `matrix`,
`validate` and `plan`.

Typer converts parameters through pydantic (typer/_adapters.py imports it) and renders help
with rich: about 0.1-0.3 s of CPU before any work, against 0.01 s for the interpreter itself
(docs/performance.md, "CLI start-up"). So `main` first offers the arguments to `try_fast`,
which reads each command's flags from the same tables as its typer command (cli/flags.py for
the selection, the command's own table beside its work) and hands anything it does not fully
understand (a subcommand's --help, an unknown flag, a number typer might read otherwise) back
to typer, whose messages and exit codes stay the reference. Errors raised by the work reach
the one error boundary (`kvbench.cli.main`) either way."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# (parameter name, kind, default); kind: paths / strs / ints (several values after one flag),
# path? / str / str? / int / int? / float? (one value), bool (a flag, its positive form only).
Flag = tuple[str, str, Any]

# Only plain ASCII numbers are read here; anything else (`1e3`, `٣`, `nan`) is typer's to
# accept or refuse, so the two paths never read one spelling differently.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_UNREAD = object()

# The top-level help as typer renders it to an 80-column colour terminal (tests/test_cli.py
# renders it again and compares; `python -m kvbench.cli.fast` rewrites it).
HELP = Path(__file__).with_name("help.txt")
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _convert(kind: str, value: str, command: str, flag: str) -> Any:
    if kind in ("paths", "path?"):
        return Path(value)
    if kind in ("int", "int?", "ints"):
        number: Any = int(value) if _INT.fullmatch(value) else _UNREAD
    elif kind == "float?":
        number = float(value) if _FLOAT.fullmatch(value) else _UNREAD
    else:
        return value
    if number is _UNREAD:
        return number
    from kvbench.bounds import option_range

    bound = option_range(command, flag)
    if bound is not None and bound.problem(number) is not None:
        return _UNREAD  # typer's usage line names the range (cli/values.py)
    return number


def parse(args: list[str], own: Iterable[Flag], command: str, selection: bool = True
          ) -> dict[str, Any] | None:
    """The parameters of `command` from its arguments (its own flags `own`, and the matrix
    selection's when `selection`), or None to let typer decide."""
    from kvbench.cli.flags import SELECTION_FLAGS, spread_multi_values

    table = [*((name, kind, default) for name, kind, default, _ in SELECTION_FLAGS
               if selection), *own]
    values: dict[str, Any] = {name: default for name, _, default in table}
    by_flag = {"--" + name.replace("_", "-"): (name, kind) for name, kind, _ in table}
    it = iter(spread_multi_values(args) if selection else args)
    for arg in it:
        flag, eq, inline = arg.partition("=")
        if flag not in by_flag:
            return None  # --help, a positional, a typo: typer's answer
        name, kind = by_flag[flag]
        if kind == "bool":
            if eq:
                return None
            values[name] = True
            continue
        value = inline if eq else next(it, None)
        if value is None or (not eq and value.startswith("-")):
            return None
        converted = _convert(kind, value, command, flag)
        if converted is _UNREAD:
            return None
        if kind in ("paths", "strs", "ints"):
            values[name] = [*(values[name] or []), converted]
        else:
            values[name] = converted
    return values


def _help_render() -> str | None:
    """The stored help as typer would print it here, or None where typer's own would differ:
    another width asked for, no colour on a terminal, colour forced when piped. On a terminal
    wider than 80 columns the stored 80-column render is printed (typer would widen the
    panels; the text is the same)."""
    env = os.environ
    if env.get("TERMINAL_WIDTH") or any(env.get(v) for v in ("FORCE_COLOR", "PY_COLORS",
                                                                "GITHUB_ACTIONS")):
        return None
    columns = env.get("COLUMNS")
    text = HELP.read_text(encoding="utf-8")
    if not sys.stdout.isatty():
        return _SGR.sub("", text) if columns in (None, "80") else None
    if "NO_COLOR" in env or env.get("TERM", "") in ("dumb", "unknown"):
        return None
    try:
        width = int(columns) if columns else os.get_terminal_size(sys.stdout.fileno()).columns
    except (ValueError, OSError):
        return None
    return text if width >= 80 else None


def _help(args: list[str]) -> bool:
    text = _help_render()
    if text is None:
        return False
    if args:  # --help: the help and a blank line, exit 0
        sys.stdout.write(text + "\n")
        return True
    # no arguments: the help, and exit 2 with an empty line on stderr (click's NoArgsIsHelp)
    sys.stdout.write(text)
    sys.stdout.flush()
    print(file=sys.stderr)
    sys.exit(2)


def try_fast(argv: list[str]) -> bool:
    """Run `argv` here when it is one of the short paths and plain; False: typer's turn."""
    if not argv or argv == ["--help"]:
        return _help(argv)
    command, rest = argv[0], argv[1:]
    if command == "version" and not rest:
        from kvbench import SCHEMA_VERSION, __version__

        print(f"kvbench {__version__} (schema {SCHEMA_VERSION})")
        return True
    if command == "validate":
        if any(a.startswith("-") for a in rest):
            return False
        from kvbench.cli.validate_fast import run_validate

        run_validate([Path(a) for a in rest])
        return True
    if command == "matrix":
        from kvbench.cli.matrix_fast import MATRIX_FLAGS, run_matrix

        values = parse(rest, MATRIX_FLAGS, "matrix")
        if values is None:
            return False
        from kvbench.cli.flags import BOTH_SCENARIOS, selection_from

        fmt, output = values.pop("format"), values.pop("output")
        run_matrix(selection_from(values, scenarios=BOTH_SCENARIOS), fmt, output)
        return True
    if command == "plan":
        from kvbench.cli.plan_fast import PLAN_FLAGS, run_plan

        values = parse(rest, PLAN_FLAGS, "plan")
        if values is None:
            return False
        from kvbench.cli.flags import selection_from

        own = {name: values.pop(name) for name, _, _ in PLAN_FLAGS}
        run_plan(selection_from(values), **own)
        return True
    return False


def _write_help() -> None:
    """Rewrite the stored help from typer's own render (`python -m kvbench.cli.fast`)."""
    import subprocess

    env = {**os.environ, "FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "80"}
    env.pop("NO_COLOR", None)
    env.pop("TERMINAL_WIDTH", None)
    out = subprocess.run([sys.executable, "-c", "from kvbench.cli import main; "
                          "main(['--help'], fast=False)"], env=env, capture_output=True,
                         text=True, check=True).stdout
    HELP.write_text(out.removesuffix("\n"), encoding="utf-8")


if __name__ == "__main__":
    _write_help()
