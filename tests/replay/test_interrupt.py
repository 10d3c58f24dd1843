"""`kvbench replay` interrupted and failing (issue 27, item 8): Ctrl-C ends the run with a
summary of what finished and exit 130, never a traceback; local options fail before any server
is contacted (exit 2); a server that goes away stops the run within a bounded time (exit 3).
Real processes throughout: the CLI in a subprocess, the reference SSE server in another."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FAST_SSE_SERVER, REPO
from fixtures.servers import free_port, sse_server

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "http_proxy": "", "https_proxy": ""}



def server(*args: str):
    return sse_server(FAST_SSE_SERVER, *args)


def start_replay(url: str, out: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "kvbench", "replay", "--url", url, "--model", "m",
            "--trace", "synthetic", "--sessions", "8", "--output", str(out), *extra]
    # SIGINT at its default in the child, as a terminal's Ctrl-C finds it
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open("rb"))
    except FileNotFoundError:
        return 0


def wait_records(out: Path, n: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while lines(out / "records.jsonl") < n:
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        assert time.monotonic() < end, "no records"
        time.sleep(0.05)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_mid_run_summarises_what_finished_and_exits_130(tmp_path, presses):
    # 64 lanes of long synthetic prompts: Ctrl-C lands while requests are in flight
    with server("--delay", "0.02") as (_, url):
        out = tmp_path / "out"
        proc = start_replay(url, out, "--concurrency", "64", "--duration", "60",
                            "--format", "json")
        wait_records(out, 2, proc)
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.02)
        # the run's own end is 60 s away: ending within the wait is Ctrl-C's doing
        stdout, stderr = proc.communicate(timeout=30)
    err = stderr.decode()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "Exception" not in err, err[-2000:]
    assert "replay interrupted after" in err and str(out / "summary.json") in err
    assert stdout == b""  # no JSON summary on stdout for a run that did not finish
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["stopped"] == "interrupted"
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    ok = [r for r in records if r["status"] == "ok"]
    assert summary["requests"]["profiled"] == len(ok) >= 2
    # requests in flight at Ctrl-C are recorded as cut off, not as server errors
    assert summary["requests"]["cancelled"] == sum(r["status"] == "cancelled" for r in records)
    assert summary["requests"]["errors"] == 0


def test_ctrl_c_before_the_first_request_says_so(tmp_path):
    with server() as (_, url):
        proc = start_replay(url, tmp_path / "out", "--max-requests", "5")
        time.sleep(0.4)  # still importing the CLI
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    err = stderr.decode()
    # A Ctrl-C that lands inside an exec() (dataclass creation at import) makes CPython 3.11
    # end the process by SIGINT once it exits, even when caught: the shell's $? is 130 alike
    assert proc.returncode in (130, -signal.SIGINT), err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[str, Callable[[], bool]]]:
    """A port that accepts connections (the kernel's backlog) and never answers, and whether
    anyone connected: a connection made stays in the backlog, even after its client exits."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)

    def contacted() -> bool:
        try:
            sock.accept()[0].close()
        except BlockingIOError:
            return False
        return True

    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", contacted
    finally:
        sock.close()


@pytest.mark.parametrize(("args", "message"), [
    (["--trace", "missing.json"], "no such trace file"),
    (["--trace", "synthetic", "--concurrency", str(2**63 - 1)],
     "--concurrency (got '9223372036854775807'): out of range"),
    (["--trace", "synthetic", "--concurrency", "0"], "concurrency"),
    (["--trace", "synthetic", "--format", "xml"], "--format 'xml' is not one of"),
    (["--trace", "synthetic", "--max-failed-ratio", "2"], "--max-failed-ratio"),
    (["--trace", "synthetic", "--server-gone-after", "0"],
     "--server-gone-after (got '0'): out of range"),
])
def test_local_options_fail_before_the_server_is_contacted(tmp_path, args, message):
    with silent_server() as (url, contacted):
        out = subprocess.run([sys.executable, "-m", "kvbench", "replay", "--url", url,
                              "--output", str(tmp_path / "out"), *args], capture_output=True,
                             text=True, env=ENV, cwd=tmp_path, timeout=60)
        assert not contacted()  # the error came before the /v1/models probe
    assert out.returncode == 2, out.stderr
    assert message in " ".join(out.stderr.split()) and "Traceback" not in out.stderr


def test_a_bad_url_is_a_usage_error_and_an_unusable_server_exit_3(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "kvbench", "replay", "--url", "ftp://x",
                          "--trace", "synthetic", "--output", str(tmp_path)],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert bad.returncode == 2 and "is not an http(s) URL" in bad.stderr
    gone = subprocess.run([sys.executable, "-m", "kvbench", "replay", "--url",
                           f"http://127.0.0.1:{free_port()}", "--trace", "synthetic",
                           "--output", str(tmp_path)],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert gone.returncode == 3 and "cannot read the served model" in gone.stderr
    assert "Traceback" not in bad.stderr + gone.stderr


def test_a_server_that_goes_away_stops_the_run_in_bounded_time(tmp_path):
    with server("--delay", "0.005") as (srv, url):
        out = tmp_path / "out"
        proc = start_replay(url, out, "--concurrency", "4", "--duration", "120",
                            "--think-time-scale", "0", "--max-tokens-cap", "8",
                            "--server-gone-after", "2", "--format", "json")
        wait_records(out, 4, proc)
        srv.kill()
        srv.wait(10)
        _, stderr = proc.communicate(timeout=60)  # the run's own end is 120 s away
    err = " ".join(stderr.decode().split())
    assert proc.returncode == 3, err[-2000:]
    assert "the replay stopped early: the server stopped answering" in err
    assert "Traceback" not in err
    # the stop was the server's absence (2 s of refusals, reconnects 0.5 s apart), not the
    # 120 s duration
    summary = json.loads((out / "summary.json").read_text())
    assert "stopped answering" in summary["run"]["stopped"]
    assert summary["requests"]["profiled"] >= 4
