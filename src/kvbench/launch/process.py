"""ServerProcess: one engine server (and its helpers, such as a router) as a context manager
that always cleans up.

The server runs in its own session and process group with its output in a log file; the
argv, working directory and (redacted) environment are written next to the log so that the
run can be replayed by hand. `wait_ready()` polls a URL until a deadline while tailing the log
and aborts as soon as the process dies, naming the failure. Leaving the `with` block, by
normal exit, exception or Ctrl-C, tears the whole tree down."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.errors import LaunchError
from kvbench.launch.failure import ServerStartError
from kvbench.launch.logtail import LogTail, read_tail
from kvbench.launch.patcher import apply_patches
from kvbench.launch.records import write_command, write_env
from kvbench.launch.signatures import cgroup_oom_kills, recognise
from kvbench.launch.tree import MARKER_VAR, ProcessTree, become_subreaper
from kvbench.launch.watchdog import Watchdog
from kvbench.redaction import redact_file, redact_text

TAIL_LINES = 40
# the lines read for the cause: SGLang 0.5.17 exits 0 after a tokenizer worker's CUDA OOM and
# logs ~140 lines of health checks and teardown after it (issue 37, call 3's probe), so the
# cause lies far above the tail a user is shown
RECOGNISE_LINES = 400


@dataclass(frozen=True, slots=True)
class HelperSpec:
    """A process started after the server is ready (a router, for example), or, with
    `before_server`, one the server needs first (a Mooncake master): started and waited for
    before the server, stopped after it."""

    name: str
    argv: Sequence[str]
    ready_url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    before_server: bool = False


# Readiness probes go straight to the local server, never through an http_proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_ok(url: str, timeout_s: float) -> bool:
    try:
        with _OPENER.open(url, timeout=timeout_s) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return False  # garbage on the port (a self-connected probe, a half-started server)


class _Proc:
    """One started process with its log and tree."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str],
                 log_path: Path, cwd: Path | None, watchdog: Watchdog | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        marker = uuid.uuid4().hex
        full_env = {**os.environ, **env, MARKER_VAR: marker}
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in close())
        try:
            self.popen = subprocess.Popen(
                self.argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as e:
            self._log.close()
            raise LaunchError(f"cannot start {name}: {e}",
                              hint=f"is {self.argv[0]!r} installed and on PATH?") from e
        self.tree = ProcessTree(self.popen.pid, marker)
        if watchdog is not None:
            watchdog.watch(self.popen.pid, marker)

    def close(self) -> None:
        self._log.close()


class ServerProcess:
    """Context manager running a server until the block ends; see the module docstring."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: str | Path,
        ready_url: str,
        ready_timeout_s: float,
        cwd: str | Path | None = None,
        extra_procs: Sequence[HelperSpec] = (),
        grace_s: float = 30.0,
        poll_interval_s: float = 0.5,
        on_log_line: Callable[[str], None] | None = None,
        name: str = "server",
        patches: Sequence[Mapping[str, object]] = (),
        patch_roots: Mapping[str, Path] | None = None,
        skip_patches: Sequence[str] = (),
    ) -> None:
        if not argv:
            raise LaunchError("empty server command line")
        self.argv = [str(a) for a in argv]
        self.env = {k: str(v) for k, v in env.items()}
        self.log_path = Path(log_path)
        self.ready_url = ready_url
        self.ready_timeout_s = ready_timeout_s
        self.cwd = Path(cwd) if cwd is not None else None
        self.extra_procs = list(extra_procs)
        self.grace_s = grace_s
        self.poll_interval_s = poll_interval_s
        self.on_log_line = on_log_line
        self.name = name
        self._procs: list[_Proc] = []
        self._oom_kills_at_start: int | None = None
        self._stopped = False
        self._old_handlers: dict[int, object] = {}
        self._watchdog: Watchdog | None = None
        self.ready_after_s: float | None = None
        self.patches = list(patches)
        self.patch_roots = patch_roots
        self.skip_patches = tuple(skip_patches)
        self.patch_outcomes: list[dict] = []

    @classmethod
    def for_spec(cls, spec: object, *, log_path: str | Path, ready_timeout_s: float,
                 cwd: str | Path | None = None, extra_args: Sequence[str] = (),
                 **kwargs: object) -> ServerProcess:
        """The server of an engines `LaunchSpec` (read by attribute: launch does not import
        engines), with its router, if any, as a helper started once the engine is ready."""
        helpers = list(kwargs.pop("extra_procs", ()))  # type: ignore[call-overload]
        for service in getattr(spec, "services", None) or ():
            helpers.append(HelperSpec(service.name, service.argv, service.ready_url,
                                      before_server=True))
        router_argv = getattr(spec, "router_argv", None)
        if router_argv:
            helpers.append(HelperSpec("router", router_argv,
                                      getattr(spec, "router_health_url", None)))
        return cls([*spec.argv, *extra_args], env=spec.env,  # type: ignore[attr-defined]
                   log_path=log_path, ready_url=spec.health_url,  # type: ignore[attr-defined]
                   ready_timeout_s=ready_timeout_s, cwd=cwd, extra_procs=helpers,
                   **kwargs)  # type: ignore[arg-type]

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> ServerProcess:
        if self._procs:
            raise LaunchError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cwd = self.cwd or Path.cwd()
        # Modify the engine image before the engine imports it (launch/patcher.py).
        self.patch_outcomes = apply_patches(self.patches, self.patch_roots, self.skip_patches)
        write_command(self.log_path.with_name("command.json"), self.argv, self.env, cwd,
                      self.ready_url, self.patch_outcomes)
        write_env(self.log_path.with_name("env.json"), self.env)
        become_subreaper()
        # Outlives a SIGKILLed kvbench and then takes the server tree down (watchdog.py).
        self._watchdog = Watchdog(self.grace_s)
        self._oom_kills_at_start = cgroup_oom_kills()
        self._started_at = time.monotonic()
        # Keep scanning while the caller works: a worker that forks and escapes to its own
        # session is only traceable while its parent lives.
        self._monitor_stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch_trees, name=f"{self.name}-tree",
                                         daemon=True)
        self._monitor.start()
        try:
            for spec in self.extra_procs:
                if spec.before_server:  # listed first, so stop() tears them down last
                    self._start_helper(spec, self._started_at + self.ready_timeout_s)
            self._server = _Proc(self.name, self.argv, self.env, self.log_path, self.cwd,
                                 self._watchdog)
        except BaseException:
            self.stop()  # a service that started must not outlive a failed start
            raise
        self._procs.append(self._server)
        return self

    def _watch_trees(self) -> None:
        while not self._monitor_stop.wait(1.0):
            for proc in list(self._procs):
                proc.tree.refresh()

    @property
    def pid(self) -> int:
        return self._main.popen.pid

    @property
    def _main(self) -> _Proc:
        server = getattr(self, "_server", None)
        if server is None:
            raise LaunchError(f"{self.name} was not started")
        return server

    def poll(self) -> int | None:
        """The exit code of the server if it has exited."""
        return self._main.popen.poll()

    def wait_ready(self) -> float:
        """Block until the server (then each helper) answers its ready URL; returns the seconds
        it took. Raises ServerStartError when a process dies or the deadline passes."""
        main = self._main
        if self.ready_after_s is not None:
            return self.ready_after_s  # helpers are already up; never start them twice
        deadline = self._started_at + self.ready_timeout_s
        self._wait_url(main, self.ready_url, deadline)
        for spec in self.extra_procs:
            if not spec.before_server:
                self._start_helper(spec, deadline)
        self.ready_after_s = time.monotonic() - self._started_at
        return self.ready_after_s

    def _start_helper(self, spec: HelperSpec, deadline: float) -> None:
        helper_log = self.log_path.with_name(f"{spec.name}.log")
        write_command(helper_log.with_name(f"{spec.name}.command.json"), spec.argv,
                      spec.env, self.cwd or Path.cwd(), spec.ready_url)
        proc = _Proc(spec.name, spec.argv, {**self.env, **spec.env}, helper_log, self.cwd,
                     self._watchdog)
        self._procs.append(proc)
        if spec.ready_url:
            self._wait_url(proc, spec.ready_url, deadline)

    def _wait_url(self, proc: _Proc, url: str, deadline: float) -> None:
        tail = LogTail(proc.log_path, self.on_log_line)
        while True:
            tail.pump()
            proc.tree.refresh()
            code = proc.popen.poll()
            if code is not None:
                tail.pump()
                raise self._failure(proc, f"{proc.name} exited with code {code} before it was "
                                    "ready", code)
            if _http_ok(url, timeout_s=min(2.0, self.poll_interval_s * 4)):
                tail.pump()
                return
            if time.monotonic() >= deadline:
                raise self._failure(proc, f"{proc.name} was not ready at {url} within "
                                    f"{self.ready_timeout_s:g} s", None, hung=True)
            time.sleep(self.poll_interval_s)

    def _failure(self, proc: _Proc, what: str, code: int | None, hung: bool = False
                 ) -> ServerStartError:
        window = [redact_text(line) for line in read_tail(proc.log_path, RECOGNISE_LINES)]
        lines = window[-TAIL_LINES:]
        now, start = cgroup_oom_kills(), self._oom_kills_at_start
        oom = None if now is None or start is None else now - start  # None: unreadable
        match = recognise(window, code, oom)
        cause = f": {match.title} ({match.line})" if match else ""
        hint = match.hint if match else None
        if hung and match is None:
            hint = "raise --ready-timeout if loading is slow, or look for a hang in the log"
        body = "\n".join(f"    {line}" for line in lines[-15:]) or "    (log is empty)"
        message = f"{what}{cause}\n  last lines of {proc.log_path}:\n{body}"
        return ServerStartError(message, hint=hint, signature=match, log_tail=lines,
                                returncode=code, log_path=proc.log_path)

    def stop(self) -> None:
        """Tear down helpers, then the server: TERM, grace period, KILL, for every process
        ever seen in each tree. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if getattr(self, "_monitor", None) is not None:
            self._monitor_stop.set()
            self._monitor.join(timeout=5)
        for proc in reversed(self._procs):
            proc.tree.terminate(self.grace_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
            proc.close()
            redact_file(proc.log_path)  # engines print their arguments, API keys included
        if self._watchdog is not None:
            self._watchdog.close()

    def __enter__(self) -> ServerProcess:
        if threading.current_thread() is threading.main_thread():
            # A scheduler's SIGTERM (Slurm, CI) and a closing terminal's SIGHUP must tear
            # down like Ctrl-C does.
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)
        try:
            return self.start()
        except BaseException:
            # Interrupted half-way through start(): whatever was started goes down too.
            try:
                with _deferred_signals():
                    self.stop()
            finally:
                self._restore_signals()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            # A second Ctrl-C or SIGTERM during teardown must not cut it short.
            with _deferred_signals():
                self.stop()
        finally:
            self._restore_signals()

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old_handlers.clear()

def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


_TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _deferred_signals():
    """Hold interrupting signals while the block runs; raise KeyboardInterrupt after it if any
    arrived (teardown completes first, then the interruption still counts)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    old = {sig: signal.signal(sig, lambda s, f: received.append(s))
           for sig in _TEARDOWN_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt(f"signal {received[0]} during teardown")
