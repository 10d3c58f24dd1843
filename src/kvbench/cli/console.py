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
