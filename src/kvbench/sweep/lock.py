"""One sweep per results directory: an exclusive flock on `.kvbench/lock`, held for the whole
sweep. The kernel drops the lock when its holder exits however it exits (SIGKILL included),
so a killed run never leaves the directory stuck; the file keeps the holder's pid and command
so the refusal names the other process."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kvbench.errors import SweepError
from kvbench.redaction import redact_argv
from kvbench.sweep.layout import sweep_dir

LOCK_FILE = "lock"


@contextlib.contextmanager
def results_lock(results: Path) -> Iterator[Path]:
    """Hold the results directory's lock, or raise a SweepError naming its holder."""
    path = sweep_dir(results) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:  # a symlink planted as the lock (ELOOP), no permission
        raise SweepError(f"{path}: cannot open the results directory's lock: {e.strerror}",
                         hint=f"remove it: rm {path}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
            raise SweepError(
                f"{Path(results)} is in use by another kvbench run ({holder})",
                hint="wait for it to finish, stop it, or give another --results") from None
        os.ftruncate(fd, 0)
        command = " ".join(["kvbench", *redact_argv(sys.argv[1:])])[:300]
        os.pwrite(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                      f"{command}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
