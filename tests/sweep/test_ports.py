"""A job's base port leaves room for every port derived from it (a sglang-router's metrics
port at +10000 once overflowed 65535 from an OS-assigned base near 61000)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from kvbench.engines.mooncake import MASTER_PORT_OFFSET
from kvbench.sweep.job import PORT_SPAN, free_port

DATA = Path(__file__).resolve().parents[2] / "src" / "kvbench" / "engines" / "data"


def test_every_port_offset_in_the_engine_data_is_inside_the_span():
    offsets = {int(m) for f in DATA.glob("*.yaml")
               for m in re.findall(r"\$\{port \+ (\d+)\}", f.read_text())}
    assert offsets and max(offsets | {MASTER_PORT_OFFSET}) < PORT_SPAN


def test_free_ports_fit_and_are_free():
    for _ in range(100):
        base = free_port()
        assert base + PORT_SPAN <= 65_535
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + 1))  # the engine's port behind a router is free too
