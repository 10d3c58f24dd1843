"""The orphan watchdog: a small process that tears a server tree down when kvbench dies.

kvbench tears its servers down on exit, exceptions and signals it can catch, but SIGKILL (or
the OOM killer) gives it no chance, and a server's workers would run on, holding GPUs and
pinned host memory. So each ServerProcess starts this watchdog in its own session (out of
reach of the terminal's signals) with a pipe on its stdin whose only writer is kvbench. kvbench
writes one line per started process (`pid marker`); the watchdog follows each tree
(`ProcessTree`, refreshed every second so workers that escape to their own session are seen
while their parent lives). End of file on the pipe means kvbench closed it (after its own
teardown) or died: either way every process still alive in the trees gets TERM, a grace
period, then KILL. Linux only, like the rest of the process tracking (/proc)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from pathlib import Path

from kvbench.launch.tree import ProcessTree

REFRESH_S = 1.0


class Watchdog:
    """kvbench's side: start the watchdog process, announce each server process to it."""

    def __init__(self, grace_s: float) -> None:
        src = str(Path(__file__).resolve().parents[2])  # the directory holding `kvbench`
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kvbench.launch.watchdog", f"{grace_s:g}"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True)

    def watch(self, pid: int, marker: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a dead watchdog must not stop a run
            self._proc.stdin.write(f"{pid} {marker}\n".encode())
            self._proc.stdin.flush()

    def close(self, timeout_s: float = 5.0) -> None:
        """After kvbench's own teardown: the watchdog finds nothing left and exits."""
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def serve(grace_s: float, stdin_fd: int = 0) -> None:
    """The watchdog process: follow the announced trees until end of file, then kill them."""
    trees: list[ProcessTree] = []
    pending = b""
    while True:
        ready, _, _ = select.select([stdin_fd], [], [], REFRESH_S)
        if ready:
            chunk = os.read(stdin_fd, 4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                pid, _, marker = line.decode(errors="replace").partition(" ")
                if pid.isdigit():
                    trees.append(ProcessTree(int(pid), marker.strip() or None))
        for tree in trees:
            tree.refresh()
    for tree in reversed(trees):
        tree.terminate(grace_s)


if __name__ == "__main__":
    # Killed with kvbench's whole process group by a shell or a scheduler, the watchdog is
    # out of that group; SIGINT/SIGHUP from a closing terminal cannot reach its session.
    serve(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
