"""A job's base port leaves room for every port derived from it (a sglang-router's metrics
port at +10000 once overflowed 65535 from an OS-assigned base near 61000), and keeps them out
of the OS's ephemeral range (a readiness probe once connected to itself: CI, stop 50)."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

from kvbench.engines.lmcache import HTTP_PORT_OFFSET
from kvbench.engines.mooncake import MASTER_PORT_OFFSET
from kvbench.launch.process import _http_ok
from kvbench.sweep.job import (
    PORT_SPAN,
    base_port_windows,
    ephemeral_range,
    free_port,
)

DATA = Path(__file__).resolve().parents[2] / "src" / "kvbench" / "engines" / "data"


def test_every_port_offset_in_the_engine_data_is_inside_the_span():
    offsets = {int(m) for f in DATA.glob("*.yaml")
               for m in re.findall(r"\$\{port \+ (\d+)\}", f.read_text())}
    lmcache_last = HTTP_PORT_OFFSET + 63  # one LMCache server per rank, up to 64
    assert offsets and max(offsets | {MASTER_PORT_OFFSET, lmcache_last}) < PORT_SPAN


def test_free_ports_fit_and_are_free():
    for _ in range(100):
        base = free_port()
        assert base + PORT_SPAN <= 65_535
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + 1))  # the engine's port behind a router is free too


def test_base_ports_and_their_derived_ports_stay_out_of_the_ephemeral_range():
    assert PORT_SPAN == 14_064  # the values below are worked out for this span
    linux = (32_768, 60_999)  # Linux's default ip_local_port_range
    # below: base + 14,063 <= 32,767, so base <= 18,703; above 60,999 nothing fits
    assert base_port_windows(PORT_SPAN, linux) == [range(10_000, 18_704)]
    # a low ephemeral range: room above it only, up to base + 14,063 <= 65,535
    assert base_port_windows(PORT_SPAN, (1_024, 9_999)) == [range(10_000, 51_472)]
    # a range high enough to leave room on both sides
    assert base_port_windows(PORT_SPAN, (30_000, 40_000)) == [range(10_000, 15_936),
                                                               range(40_001, 51_472)]
    # no room either side, or no range known: the whole span, as before
    assert base_port_windows(PORT_SPAN, (1_024, 65_535)) == [range(10_000, 51_472)]
    assert base_port_windows(PORT_SPAN, None) == [range(10_000, 51_472)]


def test_free_ports_on_this_machine_avoid_its_ephemeral_range():
    ephemeral = ephemeral_range()
    windows = base_port_windows(PORT_SPAN, ephemeral)
    for _ in range(50):
        base = free_port()
        assert any(base in w for w in windows)
        if ephemeral and windows != base_port_windows(PORT_SPAN, None):
            low, high = ephemeral
            assert base + PORT_SPAN - 1 < low or base > high


def test_the_ephemeral_range_is_read_from_the_kernel_file(tmp_path):
    f = tmp_path / "ip_local_port_range"
    f.write_text("32768\t60999\n")
    assert ephemeral_range(f) == (32_768, 60_999)
    assert ephemeral_range(tmp_path / "missing") is None
    f.write_text("garbage")
    assert ephemeral_range(f) is None


def test_a_probe_that_reads_garbage_is_not_ready():
    # What a self-connected probe reads: its own request line where a status line should be
    # (http.client.BadStatusLine, which is no OSError).
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def echo() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(conn.recv(65_536))

        thread = threading.Thread(target=echo, daemon=True)
        thread.start()
        port = server.getsockname()[1]
        assert _http_ok(f"http://127.0.0.1:{port}/health", timeout_s=5.0) is False
        thread.join(5)
