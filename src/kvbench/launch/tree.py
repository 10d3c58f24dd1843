"""The process tree of a server, found through /proc, and its teardown.

Engines fork schedulers, tokenizer workers and NCCL helpers; some call setsid() and leave the
process group. We therefore track every process ever seen below the server (by pid and start
time, so a recycled pid is never killed), make kvbench a child subreaper so that orphaned
grandchildren are re-parented to us instead of init, and signal the group and every tracked
process: TERM, a grace period, then KILL."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from dataclasses import dataclass

_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int


def read_proc(pid: int) -> ProcInfo | None:
    """Parse /proc/<pid>/stat; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name sits in parentheses and may itself contain spaces or parentheses.
    rest = raw[raw.rfind(")") + 2:].split()
    return ProcInfo(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]))


def all_procs() -> dict[int, ProcInfo]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = read_proc(int(entry))
            if info is not None:
                out[info.pid] = info
    return out


def become_subreaper() -> bool:
    """Ask Linux to re-parent our orphaned descendants to us (not init); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


MARKER_VAR = "KVBENCH_PROCESS_TREE"


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


class ProcessTree:
    """Every process seen below `root_pid`, kept across refreshes. `marker` is a
    `KVBENCH_PROCESS_TREE=<id>` entry of the root's environment: descendants inherit it, so a
    worker that escaped to its own session and lost its parent is still recognised."""

    def __init__(self, root_pid: int, marker: str | None = None) -> None:
        self.root_pid = root_pid
        self.seen: dict[int, int] = {}  # pid -> start ticks
        self._lock = threading.Lock()
        self._marker = f"{MARKER_VAR}={marker}".encode() if marker else None
        self._checked: set[tuple[int, int]] = set()
        root = read_proc(root_pid)
        self._root_start = root.start_ticks if root is not None else 0
        if root is not None:
            self.seen[root_pid] = root.start_ticks

    def refresh(self) -> None:
        """Add the current descendants of tracked processes and members of the root's
        session/process group (which survive their parent's death)."""
        with self._lock:
            self._refresh(all_procs())

    def _refresh(self, procs: dict[int, ProcInfo]) -> None:
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        frontier = [pid for pid in self.seen if self._alive_in(procs, pid)]
        frontier += [p.pid for p in procs.values()
                     if p.sid == self.root_pid or p.pgid == self.root_pid]
        if self._marker is not None:
            # Only processes born after the root can carry its marker; each is read once.
            for p in procs.values():
                key = (p.pid, p.start_ticks)
                if (p.start_ticks >= self._root_start and p.pid not in self.seen
                        and key not in self._checked):
                    self._checked.add(key)
                    if _has_marker(p.pid, self._marker):
                        frontier.append(p.pid)
        while frontier:
            pid = frontier.pop()
            info = procs.get(pid)
            if info is None or pid == os.getpid():
                continue
            if pid not in self.seen:
                self.seen[pid] = info.start_ticks
            frontier += [c for c in children.get(pid, []) if c not in self.seen]

    def _alive_in(self, procs: dict[int, ProcInfo], pid: int) -> bool:
        info = procs.get(pid)
        return info is not None and info.start_ticks == self.seen.get(pid) and info.state != "Z"

    def alive(self) -> list[int]:
        procs = all_procs()
        with self._lock:
            return [pid for pid in self.seen if self._alive_in(procs, pid)]

    def signal_all(self, sig: int) -> None:
        alive = self.alive()
        # The group only while its leader is the process we started: a dead root's pid may
        # lead someone else's group by now (its own members are tracked one by one).
        if self.root_pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.root_pid, sig)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def reap(self) -> None:
        """Collect the exit status of tracked processes that were re-parented to us."""
        me = os.getpid()
        with self._lock:
            pids = list(self.seen)
        for pid in pids:
            info = read_proc(pid)
            if info is not None and info.ppid == me and info.state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def terminate(self, grace_s: float, poll_s: float = 0.05) -> list[int]:
        """TERM everything, wait up to `grace_s`, KILL what is left; returns the pids that
        needed KILL. Re-scans between steps so late-forked children are caught too."""
        self.refresh()
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.reap()
            self.refresh()
            if not self.alive():
                return []
            time.sleep(poll_s)
        self.refresh()
        stubborn = self.alive()
        self.signal_all(signal.SIGKILL)
        # SIGKILL of a process with large pinned buffers may take a while to be reclaimed.
        kill_deadline = time.monotonic() + max(10.0, grace_s)
        while self.alive() and time.monotonic() < kill_deadline:
            self.reap()
            time.sleep(poll_s)
        self.reap()
        return stubborn
