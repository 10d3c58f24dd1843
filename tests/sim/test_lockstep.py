"""The embedded engine's virtual clock (sim/lockstep.py, replay/lockstep.py): simulated time
moves only while every lane of the client has a request in the engine, so a replay measures
what `kvbench simulate` predicts for the same requests, to the microsecond, however slow the
client is (issue 39: the quickstart's validity no longer depends on the machine's speed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import orjson
import pytest
from aiohttp import ClientSession, web
from conftest import REPO
from fixtures.servers import free_port as _free_port

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
from kvbench.sim.lockstep import LaneError, Lockstep, Successor
from kvbench.sim.server import ServerConfig, SimServer, build_app
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.workload import SyntheticSpec, generate_sessions
from kvbench.workload.bounds import WorkloadBounds

COSTS = CostModel.reference(load_hardware("h200"))
SESSIONS = generate_sessions(SyntheticSpec(num_sessions=5, seed=11, scale=0.02, max_turns=6))
GPU_TOKENS = 6000  # small enough that lanes evict one another: the order of events matters


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

    async def slow_warm(self, *args):
        time.sleep(0.005)
        await warm(self, *args)

    monkeypatch.setattr(Lanes, "_warm", slow_warm)
    slow, summary = _replay(tmp_path / "slow", **bounds)
    assert slow == quick
    assert summary["client"]["loop_lag_ms_p99"] >= 4.0  # the lag happened, and was harmless


def test_the_lockstep_waits_for_what_follows_each_end_and_submits_in_end_order():
    step = Lockstep()
    submitted: list[tuple[str, float]] = []

    def submit(name):
        return lambda at_s: submitted.append((name, at_s))

    assert not step.held()  # no run: a curl request holds nothing
    step.start_run(2, 10.0)
    assert step.held()  # each lane owes its first request
    step.arrive(Successor("lane-1", 0, 1), submit("b0"))
    assert step.held() and submitted == []
    step.arrive(Successor("lane-0", 0, 1, delay_ns=500_000_000), submit("a0"))
    assert submitted == [("a0", 10.5), ("b0", 10.0)] and not step.held()  # lane order
    step.ended("r2", 20.0)  # b0 ended first, then a0
    step.ended("r1", 20.0)
    assert step.held()
    # r1 (a0) spawns two successors; r2 (b0) ends its lane's tree: none follow
    step.arrive(Successor("r1", 1, 2), submit("a2"))
    ticket = step.arrive(Successor("r1", 0, 2), submit("gone"))[1]
    assert step.held() and submitted[2:] == [] and set(step.owed) == {"r2"}
    assert step.withdraw(ticket)  # its client went away before it was submitted
    step.resolve("r2", 0, 0)
    assert submitted[2:] == [("a2", 20.0)] and not step.held()
    step.ended("r3", 25.0)
    with pytest.raises(LaneError, match="'r1' is not a request this run still owes"):
        step.arrive(Successor("r1", 0, 2), submit("late"))
    step.arrive(Successor("r3", 0, 2), submit("c1"))
    with pytest.raises(LaneError, match="was said to have 2 successors, now 3"):
        step.resolve("r3", 3, 1)
    step.resolve("r3", 2, 1)  # the other successor will not come
    assert submitted[-1] == ("c1", 25.0) and not step.held()
    step.start_run(1, 30.0)  # a new run starts afresh
    assert set(step.owed) == {"lane-0"}


def test_the_protocol_is_one_set_of_names_and_refuses_what_a_virtual_clock_cannot_keep():
    for name in ("AFTER_HEADER", "FOLLOWS_HEADER", "DELAY_HEADER", "STAMP_FIELD", "RUN_PATH",
                 "RESOLVE_PATH"):
        assert getattr(client_side, name) == getattr(server_side, name)
    for name in ("ARRIVAL_HEADER", "REQUEST_HEADER"):
        assert getattr(server_side, name).lower() == getattr(client_side, name)
    assert server_side.CLOCK_HEADER == CLIENT_CLOCK_HEADER
    assert resolve_time_scale(None, None, virtual=True) == (1.0, "server")
    with pytest.raises(ReplayOptionError, match="clock is virtual"):
        resolve_time_scale(20.0, None, virtual=True)
    base = {"url": "http://127.0.0.1:1", "model": "m", "output_dir": ".", "concurrency": 4}
    assert virtual_config(ReplayConfig(**base), True).virtual_lanes == 4
    with pytest.raises(ReplayOptionError, match="open loop"):
        virtual_config(ReplayConfig(**base, session_rate=1.0), True)
    for extra, flag in (({"system_idle_cap_s": 10.0}, "--system-idle-cap"),
                        ({"start": "sampled"}, "--start sampled"),
                        ({"warmup_per_lane": 10}, "--warmup-per-lane")):
        with pytest.raises(ReplayOptionError, match=flag):
            virtual_config(ReplayConfig(**base, **extra), True)


def test_bad_succession_is_the_clients_error(tmp_path):
    async def go() -> list:
        out = []
        for clock in ("virtual", "wall"):
            runner, url = await _virtual_server(clock)
            try:
                async with ClientSession() as http:
                    body = {"model": "sim", "prompt": "a b c", "max_tokens": 2}
                    async with http.post(f"{url}/v1/completions", json=body, headers={
                            "X-Kvbench-After": "lane-0", "X-Kvbench-Follows": "3/2"}) as r:
                        out.append((clock, r.status, await r.text()))
                    async with http.post(f"{url}/kvbench/resolve",
                                         data=orjson.dumps({"after": "r9", "count": 0,
                                                            "skipped": 0})) as r:
                        out.append((clock, r.status, await r.text()))
                    async with http.post(f"{url}/v1/completions", json=body) as r:
                        # no succession (curl): answered at once
                        out.append((clock, r.status, r.headers.get("X-Kvbench-Clock")))
            finally:
                await runner.cleanup()
        return out

    (v_succ, v_res, v_plain, w_succ, w_res, w_plain) = asyncio.run(go())
    assert v_succ[1] == 400 and "allowed 0 <= i < n" in v_succ[2]
    assert v_res[1] == 400 and "'r9' is not a request this run still owes" in v_res[2]
    assert v_plain == ("virtual", 200, "virtual")
    assert w_succ[1] == 200  # a wall clock ignores succession headers
    assert w_res[1] == 404 and "not virtual" in w_res[2]
    assert w_plain == ("wall", 200, None)


def test_serve_sim_refuses_a_time_scale_on_a_virtual_clock():
    out = subprocess.run([sys.executable, "-m", "kvbench", "serve-sim", "--clock", "virtual",
                          "--time-scale", "50", "--port", "1"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: --time-scale 50 with --clock virtual"), out.stderr
    assert "Traceback" not in out.stderr
