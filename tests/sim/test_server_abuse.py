"""`kvbench serve-sim` under abuse, as a real process: clients that disconnect mid-stream or
while queued (their requests leave the queue and the running set), garbage requests, four
256-session replays on one server (nothing held after each: its RSS is measured by
benchmarks/serve_sim_rss.py, not asserted), SIGTERM with streams open (it drops them instead
of finishing them), and bad --port/--host or a port in use (clean errors). Its log never
holds a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.servers import free_port, stop
from fixtures.transformers_server import wait_http

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "http_proxy": "", "https_proxy": ""}
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def serve_sim(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    log = tmp_path / "serve-sim.log"
    proc = subprocess.Popen([sys.executable, "-m", "kvbench", "serve-sim", "--port", str(port),
                             *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, env=ENV)
    wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    return proc, f"http://127.0.0.1:{port}", log


def gauges(url: str) -> dict[str, float]:
    with OPENER.open(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^(sglang:num_(?:running|queue)_reqs)\S* (\S+)$", text, re.M)}


def open_stream(url: str, max_tokens: int) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": "m", "stream": True, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "hello " * 50}]}).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
              + body)
    return s


def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.slow
def test_disconnects_cancel_queued_and_running_requests(tmp_path):
    # 4 running at most: 12 clients leave 4 running and 8 queued, each asking for 20,000
    # tokens (minutes of simulated decoding): only cancellation can empty the engine
    proc, url, log = serve_sim(tmp_path, "--max-running-requests", "4")
    try:
        clients = [open_stream(url, 20_000) for _ in range(12)]
        for c in clients[:4]:
            assert c.recv(64).startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: gauges(url).get("sglang:num_running_reqs") == 4, 10)
        assert gauges(url)["sglang:num_queue_reqs"] == 8
        for c in clients:
            c.close()
        assert wait_for(lambda: gauges(url) == {"sglang:num_running_reqs": 0,
                                                 "sglang:num_queue_reqs": 0}, 10), gauges(url)
        # garbage: not JSON, a JSON list, a bad max_tokens, raw bytes, a half request
        for body in (b"{not json", b"[1,2]", b'{"messages": [], "max_tokens": -1}'):
            req = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as e:
                OPENER.open(req, timeout=10)
            assert e.value.code == 400
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"\x00\xff garbage\r\n\r\n")
            s.recv(100)
        half = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{")
        half.close()
        assert gauges(url)["sglang:num_running_reqs"] == 0
    finally:
        stop(proc)
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
def test_sigterm_with_streams_open_drops_them(tmp_path):
    proc, url, log = serve_sim(tmp_path)
    clients = [open_stream(url, 20_000) for _ in range(8)]
    try:
        for c in clients:
            assert c.recv(64).startswith(b"HTTP/1.1 200")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)  # 20,000 tokens a stream are minutes of simulated decoding
        for c in clients:  # each stream ends unfinished: the server stopped, not the streams
            c.settimeout(30)
            rest = b"".join(iter(lambda c=c: c.recv(65536), b""))
            assert b"[DONE]" not in rest, rest[-200:]
    finally:
        for c in clients:
            c.close()
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
def test_nothing_is_held_after_256_session_replays(tmp_path):
    # the run benchmarks/serve_sim_rss.py measures the RSS of, twice here
    proc, url, log = serve_sim(tmp_path, "--time-scale", "100")
    try:
        for i in range(2):
            out = subprocess.run(
                [sys.executable, "-m", "kvbench", "replay", "--url", url, "--trace",
                 "synthetic", "--sessions", "256", "--concurrency", "64", "--max-requests",
                 "256", "--think-time-scale", "0", "--max-tokens-cap", "16", "--time-scale",
                 "100", "--output", str(tmp_path / f"run{i}"), "--format", "json"],
                capture_output=True, text=True, env=ENV, timeout=300)
            assert out.returncode == 0, out.stderr[-2000:]
            assert json.loads(out.stdout)["requests"]["errors"] == 0
            assert wait_for(lambda: not any(gauges(url).values()), 30)  # idle: nothing held
    finally:
        stop(proc)
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("args,message", [
    (["--port", "70000"], "error: kvbench serve-sim: invalid value for --port (got '70000'): "
                          "out of range (allowed: an integer 1 to 65,535"),
    (["--port", "0"], "error: kvbench serve-sim: invalid value for --port (got '0'): out of "
                      "range"),
    (["--host", "no.such.host.invalid"], "error: --host 'no.such.host.invalid' does not resolve"),
])
def test_bad_address_is_a_clean_error(args, message):
    out = subprocess.run([sys.executable, "-m", "kvbench", "serve-sim", *args],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith(message) and "Traceback" not in out.stderr


def test_port_in_use_is_a_clean_error():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "kvbench", "serve-sim", "--port", str(port)],
                             capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 2
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in out.stderr
    assert "hint: another server holds it" in out.stderr and "Traceback" not in out.stderr
