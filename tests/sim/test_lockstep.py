"""The embedded engine's virtual clock (sim/lockstep.py, replay/lockstep.py): simulated time
moves only while every lane of the client has a request in the engine, so a replay measures
what `kvbench simulate` predicts for the same requests, to the microsecond, however slow the
client is (issue 39: the quickstart's validity no longer depends on the machine's speed)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import orjson
import pytest
from aiohttp import ClientSession, web
from conftest import REPO

from kvbench.errors import ReplayOptionError
from kvbench.files import read_jsonl
from kvbench.hardware import load_hardware
from kvbench.replay import ReplayConfig, replay
from kvbench.replay import lockstep as client_side
from kvbench.replay.clock import CLOCK_HEADER as CLIENT_CLOCK_HEADER
from kvbench.replay.clock import resolve_time_scale, virtual_config
from kvbench.replay.lanes import Lanes
from kvbench.sim import lockstep as server_side
from kvbench.sim.costs import CostModel
from kvbench.sim.lockstep import LaneError, LaneRequest, Lockstep
from kvbench.sim.server import ServerConfig, SimServer, build_app
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.workload import SyntheticSpec, generate_sessions
from kvbench.workload.bounds import WorkloadBounds

COSTS = CostModel.reference(load_hardware("h200"))
SESSIONS = generate_sessions(SyntheticSpec(num_sessions=5, seed=11, scale=0.02, max_turns=6))
GPU_TOKENS = 6000  # small enough that lanes evict one another: the order of events matters


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _virtual_server(clock: str = "virtual"):
    server = SimServer(ServerConfig(served_model_name="sim", gpu_tokens=GPU_TOKENS,
                                    clock=clock), COSTS)
    runner = web.AppRunner(build_app(server))
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def _replay(tmp_path, **bounds) -> tuple[dict, dict]:
    async def go():
        runner, url = await _virtual_server()
        try:
            cfg = ReplayConfig(url=url, model="sim", endpoint="completions",
                               output_dir=tmp_path, **bounds)
            summary = await replay(cfg, sessions=SESSIONS)
        finally:
            await runner.cleanup()
        return summary

    summary = asyncio.run(go())
    timed = {(r["session_id"], r["turn"]): (r["t_send_ns"], r["t_first_ns"] - r["t_send_ns"],
                                            r["t_last_ns"] - r["t_send_ns"], r["cached_tokens"])
             for r in read_jsonl(tmp_path / "records.jsonl")}
    return timed, summary


def _simulated(**bounds) -> dict:
    done: list = []
    run_sessions(SESSIONS, COSTS, SimSetup(GPU_TOKENS), WorkloadBounds(**bounds), requests=done)
    return {(r.meta["session_id"], r.meta["turn"]): (
        round(r.arrival_s * 1e9), round(r.first_s * 1e9) - round(r.arrival_s * 1e9),
        round(r.finish_s * 1e9) - round(r.arrival_s * 1e9), r.cached_tokens) for r in done}


def _close(a: dict, b: dict) -> bool:
    """The same requests with the same times, to a microsecond (ns stamps are rounded)."""
    return a.keys() == b.keys() and all(
        x[3] == y[3] and all(abs(p - q) <= 1_000 for p, q in zip(x[:3], y[:3], strict=True))
        for x, y in ((a[k], b[k]) for k in a))


@pytest.mark.parametrize("bounds", [
    {"concurrency": 3, "max_requests": 14, "think_time_scale": 0.0},
    # think times are sent, not slept; a duration ends each lane at its own simulated time
    {"concurrency": 3, "duration_s": 30.0, "think_time_scale": 0.5},
], ids=["request-cap", "duration-with-think-times"])
def test_a_replay_measures_what_the_simulator_predicts(tmp_path, bounds):
    timed, summary = _replay(tmp_path, **bounds)
    assert _close(timed, _simulated(**bounds)), (timed, _simulated(**bounds))
    assert summary["run"]["clock"] == "virtual" and summary["run"]["time_scale"] == 1.0
    assert summary["client"]["clock"] == "virtual" and not summary["client"]["saturated"]


def test_the_clients_lag_enters_no_timing(tmp_path, monkeypatch):
    """A client that blocks its own event loop 5 ms before every turn (a busy machine, at a
    50x wall clock 250 ms of the engine's time each) records the same times to the ns."""
    bounds = {"concurrency": 3, "max_requests": 12, "think_time_scale": 0.0}
    quick, _ = _replay(tmp_path / "quick", **bounds)
    warm = Lanes._warm

    async def slow_warm(self, turn, namespace):
        time.sleep(0.005)
        await warm(self, turn, namespace)

    monkeypatch.setattr(Lanes, "_warm", slow_warm)
    slow, summary = _replay(tmp_path / "slow", **bounds)
    assert slow == quick
    assert summary["client"]["loop_lag_ms_p99"] >= 4.0  # the lag happened, and was harmless


def test_the_lockstep_waits_for_every_lane_and_submits_in_finish_order():
    step = Lockstep()
    submitted: list[int] = []
    assert not step.held()  # no lanes announced: a curl request holds nothing
    step.arrive(LaneRequest(1, 3), lambda: submitted.append(1))
    step.arrive(LaneRequest(0, 3), lambda: submitted.append(0))
    assert step.held() and submitted == []  # lane 2 owes its first request
    step.arrive(LaneRequest(2, 3), lambda: submitted.append(2))
    assert submitted == [0, 1, 2] and not step.held()  # first requests in lane order
    step.finished(2)
    step.finished(0)
    assert step.held()
    ticket = step.arrive(LaneRequest(0, 3), lambda: submitted.append(0))
    step.withdraw(0, ticket)  # its client went away before it was submitted
    assert step.held()
    step.arrive(LaneRequest(0, 3), lambda: submitted.append(0))
    step.arrive(LaneRequest(2, 3), lambda: submitted.append(2))
    assert submitted[3:] == [2, 0]  # lane 2's last request finished first
    step.finished(1)
    step.end(1, 3)  # a lane that sends nothing more stops holding the clock
    assert not step.held()
    with pytest.raises(LaneError, match="after it ended"):
        step.arrive(LaneRequest(1, 3), lambda: None)
    with pytest.raises(LaneError, match="contradicts the 3 lanes"):
        step.arrive(LaneRequest(0, 4), lambda: None)
    for lane in (0, 2):
        step.finished(lane)
        step.end(lane, 3)
    step.arrive(LaneRequest(0, 1), lambda: submitted.append(9))  # the next run's lanes
    assert submitted[-1] == 9


def test_the_protocol_is_one_set_of_names_and_refuses_what_a_virtual_clock_cannot_keep():
    for name in ("LANE_HEADER", "LANES_HEADER", "THINK_HEADER", "STAMP_FIELD", "LANE_END_PATH"):
        assert getattr(client_side, name) == getattr(server_side, name)
    assert server_side.ARRIVAL_HEADER.lower() == client_side.ARRIVAL_HEADER
    assert CLIENT_CLOCK_HEADER == server_side.CLOCK_HEADER
    assert resolve_time_scale(None, None, virtual=True) == (1.0, "server")
    with pytest.raises(ReplayOptionError, match="clock is virtual"):
        resolve_time_scale(20.0, None, virtual=True)
    base = {"url": "http://127.0.0.1:1", "model": "m", "output_dir": ".", "concurrency": 4}
    assert virtual_config(ReplayConfig(**base), True).virtual_lanes == 4
    with pytest.raises(ReplayOptionError, match="open loop"):
        virtual_config(ReplayConfig(**base, session_rate=1.0), True)
    with pytest.raises(ReplayOptionError, match="system-idle-cap"):
        virtual_config(ReplayConfig(**base, system_idle_cap_s=10.0), True)


def test_bad_lane_headers_are_the_clients_error(tmp_path):
    async def go() -> list:
        out = []
        for clock in ("virtual", "wall"):
            runner, url = await _virtual_server(clock)
            try:
                async with ClientSession() as http:
                    body = {"model": "sim", "prompt": "a b c", "max_tokens": 2}
                    async with http.post(f"{url}/v1/completions", json=body, headers={
                            "X-Kvbench-Lane": "5", "X-Kvbench-Lanes": "2"}) as r:
                        out.append((clock, r.status, await r.text()))
                    async with http.post(f"{url}/kvbench/lane-end",
                                         data=orjson.dumps({"lane": "x", "lanes": 2})) as r:
                        out.append((clock, r.status, await r.text()))
                    async with http.post(f"{url}/v1/completions", json=body) as r:
                        # no lane headers (curl): answered at once, with its stamps
                        out.append((clock, r.status, r.headers.get("X-Kvbench-Clock")))
            finally:
                await runner.cleanup()
        return out

    (v_lane, v_end, v_plain, w_lane, w_end, w_plain) = asyncio.run(go())
    assert v_lane[1] == 400 and "allowed 0 <= lane < lanes" in v_lane[2]
    assert v_end[1] == 400 and "'lane' and 'lanes' must be integers" in v_end[2]
    assert v_plain == ("virtual", 200, "virtual")
    assert w_lane[1] == 200  # a wall clock ignores lane headers
    assert w_end[1] == 404 and "not virtual" in w_end[2]
    assert w_plain == ("wall", 200, None)


def test_serve_sim_refuses_a_time_scale_on_a_virtual_clock():
    out = subprocess.run([sys.executable, "-m", "kvbench", "serve-sim", "--clock", "virtual",
                          "--time-scale", "50", "--port", "1"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: --time-scale 50 with --clock virtual"), out.stderr
    assert "Traceback" not in out.stderr
