"""The clock handshake against a real `kvbench serve-sim --time-scale 20`: replay without
--time-scale reports the server's clock (the same TPOT as with the flag), a contradicting
--time-scale is refused with one clear line, and /metrics carries the scale as a gauge."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from fixtures.sim_server import ENV, REPO, serve_sim

from kvbench.errors import ReplayError
from kvbench.replay.clock import TIME_SCALE_HEADER, resolve_time_scale

TRACE = REPO / "src" / "kvbench" / "workload" / "data" / "claude-code" / "trace_0076.json.gz"


def test_resolution_rules():
    assert resolve_time_scale(None, 20.0) == (20.0, "server")
    assert resolve_time_scale(20.0, 20.0) == (20.0, "server")
    assert resolve_time_scale(5.0, None) == (5.0, "option")
    assert resolve_time_scale(None, None) == (1.0, "default")
    with pytest.raises(ReplayError, match="--time-scale 1 contradicts the server"):
        resolve_time_scale(1.0, 20.0)


def test_the_server_sends_the_header_replay_reads():
    from kvbench.sim.server import TIME_SCALE_HEADER as SENT

    assert SENT == TIME_SCALE_HEADER


@pytest.fixture(scope="module")
def sim20(tmp_path_factory):
    with serve_sim(tmp_path_factory.mktemp("sim") / "server.log", "--time-scale", "20") as url:
        yield url


def _replay(base: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvbench", "replay", "--url", base, "--trace", str(TRACE),
         "--output", str(out), "--max-requests", "6", "--max-tokens-cap", "64",
         "--think-time-scale", "0", "--format", "json", *extra],
        env=ENV, capture_output=True, text=True, timeout=120)


def test_replay_reports_the_servers_clock_without_being_told(sim20, tmp_path):
    with urllib.request.urlopen(f"{sim20}/metrics", timeout=5) as r:
        assert r.headers[TIME_SCALE_HEADER] == "20.0"
        assert "kvbench:sim_time_scale 20.0" in r.read().decode()
    told = _replay(sim20, tmp_path / "told", "--time-scale", "20")
    untold = _replay(sim20, tmp_path / "untold")
    assert told.returncode == 0 and untold.returncode == 0, untold.stderr[-2000:]
    a, b = json.loads(told.stdout), json.loads(untold.stdout)
    assert b["run"]["time_scale"] == 20.0 and b["run"]["time_scale_source"] == "server"
    tpot_a, tpot_b = a["tpot_ms"]["p50"], b["tpot_ms"]["p50"]
    # an 8B bf16 model on one H200 reads 16 GB of weights per step at 4.8 TB/s: >= 3.3 ms
    # per token in the engine's clock (wall time would say 20x less)
    assert tpot_b > 3.0 and tpot_a > 3.0
    assert 0.6 < tpot_b / tpot_a < 1.6, (tpot_a, tpot_b)


def test_a_contradicting_time_scale_is_refused(sim20, tmp_path):
    res = _replay(sim20, tmp_path / "bad", "--time-scale", "1")
    assert res.returncode == 2
    assert "--time-scale 1 contradicts the server, whose clock runs 20x wall time" in res.stderr
    assert "Traceback" not in res.stderr
