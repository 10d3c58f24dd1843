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
    PORT_LOW,
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
    linux = (32_768, 60_999)  # Linux's default ip_local_port_range
    windows = base_port_windows(PORT_SPAN, linux)
    assert windows == [range(PORT_LOW, 32_768 - PORT_SPAN)]  # nothing fits above 60999
    assert len(windows[0]) > 8_000
    low_range = (1_024, 9_999)  # room above only
    assert base_port_windows(PORT_SPAN, low_range) == [range(10_000, 65_536 - PORT_SPAN)]
    # no room either side: the whole span, as before
    assert base_port_windows(PORT_SPAN, (1_024, 65_535)) == [range(PORT_LOW, 65_536 - PORT_SPAN)]
    assert base_port_windows(PORT_SPAN, None) == [range(PORT_LOW, 65_536 - PORT_SPAN)]


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
