"""Following and reading the end of server logs."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from pathlib import Path


class LogTail:
    """Follows a log file and hands complete new lines to a callback."""

    def __init__(self, path: Path, callback: Callable[[str], None] | None) -> None:
        self.path = path
        self.callback = callback
        self.offset = 0
        self.partial = b""

    def pump(self) -> None:
        if self.callback is None:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        self.offset += len(chunk)
        data = self.partial + chunk
        *lines, self.partial = data.split(b"\n")
        for line in lines:
            self.callback(line.decode(errors="replace"))


def read_tail(path: Path, n: int, max_bytes: int = 256 * 1024) -> list[str]:
    """The last `n` lines of a (possibly huge) log file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut by the seek
    return list(deque(lines, maxlen=n))
