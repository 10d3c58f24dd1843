"""The console tables print to: the terminal's width on a terminal, and wide enough when
piped or redirected that no name is cut at rich's default 80 columns."""

from __future__ import annotations

import sys

PIPED_WIDTH = 400


def table_console(*, stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPED_WIDTH,
                   highlight=False)


def check_format(value: str, allowed: tuple[str, ...], error: type) -> None:
    """`--format` outside `allowed`: one line naming the value and the choices (exit 2)."""
    if value not in allowed:
        raise error(f"--format {value!r} is not one of {', '.join(allowed)}")
