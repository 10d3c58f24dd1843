"""`kvbench simulate` and `kvbench replay` take the same workload bounds and so run the same
requests: a real replay against the embedded engine over HTTP, and the simulator in virtual
time on the same sessions, give the same set of (session, turn, input tokens, output tokens,
warm-up) for each bound."""

from __future__ import annotations

import asyncio
import math

import pytest
from aiohttp import web
from fixtures.servers import free_port as _free_port

from kvbench.files import read_jsonl
from kvbench.hardware import load_hardware
from kvbench.replay import ReplayConfig, replay
from kvbench.sim.costs import CostModel
from kvbench.sim.server import ServerConfig, SimServer, build_app
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.workload import SyntheticSpec, generate_sessions
from kvbench.workload.bounds import WorkloadBounds

COSTS = CostModel.reference(load_hardware("h200"))
SESSIONS = generate_sessions(SyntheticSpec(num_sessions=5, seed=11, scale=0.02, max_turns=6))


async def _replay(cfg_kwargs: dict, tmp_path) -> list[dict]:
    server = SimServer(ServerConfig(served_model_name="sim", gpu_tokens=math.inf,
                                    time_scale=1000.0), COSTS)
    runner = web.AppRunner(build_app(server))
    await runner.setup()
    port = _free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="sim", output_dir=tmp_path,
                           time_scale=1000.0, **{"endpoint": "completions", **cfg_kwargs})
        await replay(cfg, sessions=SESSIONS)
    finally:
        await runner.cleanup()
    return read_jsonl(tmp_path / "records.jsonl")


def _replayed(records: list[dict]) -> set[tuple]:
    return {(r["session_id"], r["turn"], r["prompt_tokens"], r["completion_tokens"],
             r["is_warmup"]) for r in records}


def _simulated(bounds: WorkloadBounds) -> tuple[set[tuple], dict]:
    done = []
    summary = run_sessions(SESSIONS, COSTS, SimSetup(math.inf), bounds, requests=done)
    return {(r.meta["session_id"], r.meta["turn"], r.input_tokens, r.output_tokens,
             r.meta["is_warmup"]) for r in done}, summary


CASES = {
    # every session once, sampled start (warm turns), capped output and think, 2 lanes
    "sampled-start": dict(concurrency=2, start="sampled", seed=5, max_tokens_cap=3,
                          think_time_cap_s=0.5, max_input_tokens=2_000),
    # one lane recycling sessions until the request cap, first requests as warm-up
    "request-cap": dict(concurrency=1, max_requests=33, warmup_requests=2, max_tokens_cap=2,
                        think_time_cap_s=0.2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_and_simulate_send_the_same_requests(case: str, tmp_path) -> None:
    kw = CASES[case]
    records = asyncio.run(_replay(kw, tmp_path))
    assert all(r["status"] == "ok" for r in records)
    bounds = WorkloadBounds(**kw)
    assert ReplayConfig(url="http://x", model="m", output_dir=tmp_path, **kw).bounds == bounds
    sim, summary = _simulated(bounds)
    assert sim == _replayed(records)
    warm = sum(1 for r in records if r["is_warmup"])
    assert summary["warmup_requests"] == warm
    assert summary["requests"] == len(records) - warm
    if case == "request-cap":
        assert len(records) - warm == 33 and warm == 2
        # sessions were recycled: a second pass runs under its own id
        assert any("#1" in r["session_id"] for r in records)
    else:
        assert warm > 0  # sampled start sent warm-up turns
        assert max(r["completion_tokens"] for r in records) == 3


def test_duration_stops_sends_in_simulated_time() -> None:
    """A 30 s simulated bound: no request arrives at or after 30 s, sessions recycle."""
    done = []
    bounds = WorkloadBounds(concurrency=3, duration_s=30.0, think_time_cap_s=1.0, grace_s=0.0)
    summary = run_sessions(SESSIONS, COSTS, SimSetup(math.inf), bounds, requests=done)
    assert done and max(r.arrival_s for r in done) < 30.0
    assert max(r.finish_s for r in done) <= 30.0
    assert summary["setup"]["bounds"]["duration_s"] == 30.0


def test_bad_bound_names_the_field() -> None:
    from kvbench.errors import WorkloadError

    with pytest.raises(WorkloadError, match=r"duration_s = -1.0; allowed: > 0"):
        WorkloadBounds(duration_s=-1.0)
    with pytest.raises(WorkloadError, match=r"start = 'middle'; allowed: beginning \| sampled"):
        WorkloadBounds(start="middle")


def test_simulate_cli_takes_the_replay_bounds(capsys) -> None:
    from kvbench.cli import main

    main(["simulate", "--trace", "synthetic", "--sessions", "4", "--concurrency", "2",
          "--max-requests", "12", "--warmup-requests", "3", "--max-tokens-cap", "5",
          "--gpu-tokens", "inf", "--format", "json"])
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["requests"] == 12 and doc["warmup_requests"] == 3
    assert doc["completion_tokens"] <= 12 * 5
    assert doc["setup"]["bounds"]["max_requests"] == 12


def test_simulate_cli_refuses_bounds_in_open_loop(capsys) -> None:
    from kvbench.cli import main

    with pytest.raises(SystemExit) as e:
        main(["simulate", "--trace", "synthetic", "--open-loop", "--max-requests", "12"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--max-requests: workload bounds apply to closed-loop lanes" in err


# (sessions, lanes, one-token warm-up requests per lane): agentx-small's trees, 3 per lane;
# the synthetic sessions, where both lanes' trees end with the warm-up (the replay's lanes take
# the pool's next sessions at the profiling start; the simulator's stayed idle and never sent
# them: issue 37's held-out runs); agentx-small on 3 lanes, 11 per lane, where its pool of 4
# sessions runs out during the warm-up
AGENTX_WARMUPS = [("agentx-small", 2, 3), ("synthetic", 2, 3), ("agentx-small", 3, 11)]


@pytest.mark.parametrize(("sessions", "lanes", "per_lane"), AGENTX_WARMUPS)
def test_agentx_trees_and_warm_up_are_the_same_requests_in_both(
        sessions: str, lanes: int, per_lane: int, tmp_path) -> None:
    """Subagent trees and the AgentX warm-up (each lane's first tree at t*, its t* requests,
    then `per_lane` one-token requests per lane) run the same requests through the replay and
    the simulator."""
    from conftest import TRACES

    from kvbench.workload import load_trace

    global SESSIONS
    kept = SESSIONS
    if sessions != "synthetic":
        SESSIONS = load_trace(TRACES / sessions)
    try:
        kw = dict(concurrency=lanes, start="sampled", start_ratio=(0.25, 0.75), seed=42,
                  warmup_per_lane=per_lane, think_time_cap_s=None, max_tokens_cap=3)
        records = asyncio.run(_replay(kw, tmp_path))
        sim, summary = _simulated(WorkloadBounds(**kw))
    finally:
        SESSIONS = kept
    assert all(r["status"] == "ok" for r in records)
    assert sim == _replayed(records)
    warm = [r for r in records if r["is_warmup"]]
    assert len(warm) == summary["warmup_requests"] >= lanes * (1 + min(per_lane, 3))
    assert {r["max_tokens"] for r in warm} == {1}
    assert summary["inflight"]["lanes"] == lanes and summary["phase"]["profiling_start_s"] > 0


def _prefixed_sessions() -> list:
    """Two traces with a declared 2-block system prefix (Weka's `system_tokens`): each turn
    grows its context by whole blocks and a partial last block whose id changes when it fills,
    as a trace's hash of a partial block does."""
    from kvbench.workload.session import Session, Turn

    out = []
    for s in range(2):
        base = 100 * s
        turns = [Turn(4 * 64 + 10, 2, (1, 2, 3, 4, base + 50), 64),
                 Turn(6 * 64 + 20, 2, (1, 2, 3, 4, 5, 6, base + 51), 64),
                 Turn(7 * 64 + 5, 2, (1, 2, 3, 4, 5, 6, 7, base + 52), 64)]
        out.append(Session(f"t{s}", turns, f"t{s}", "test",
                           {"prompt_prefix_tokens": {"": 128}}))
    return out


def _agentx_in_both(sessions: list, max_requests: int, tmp_path) -> tuple[list[dict], dict]:
    """`sessions` on two lanes under the AgentX profile (its chat prompts and tree markers,
    no other setting of it), recycled up to `max_requests`: the replay's records against the
    embedded engine, and the simulator's requests on the replay's bounds by (session, turn)."""
    global SESSIONS
    kw = dict(concurrency=2, max_requests=max_requests, think_time_cap_s=0.0,
              max_tokens_cap=2, endpoint="chat", profile="agentx")
    bounds = ReplayConfig(url="http://x", model="m", output_dir=tmp_path, **kw).bounds
    assert bounds.tree_markers
    kept, SESSIONS = SESSIONS, sessions
    try:
        records = asyncio.run(_replay(kw, tmp_path))
    finally:
        SESSIONS = kept
    done: list = []
    run_sessions(sessions, COSTS, SimSetup(math.inf), bounds, requests=done)
    return records, {(r.meta["session_id"], r.meta["turn"]): r for r in done}


def test_the_simulator_splits_each_prompt_at_the_trees_marker_as_the_replay(tmp_path) -> None:
    """Under the AgentX profile the replay opens each chat prompt with the harness's marker
    per session tree, after the system message; its ideal-cache ceiling shares the blocks
    before the marker across trees (another pass of the trace) and the rest only within the
    tree. The simulator, on the replay's own bounds, caches the same tokens per request: the
    ceiling whole where a prompt's match ends at or before the marker (a new tree's first
    turn: its system blocks), else the ceiling less the marker's tokens (its pages are the
    trace's blocks: the marker's tokens are computed, as on an engine whose page is a block).
    Two lanes, two traces, each replayed twice."""
    sessions = _prefixed_sessions()
    inputs = {s.session_id: [t.input_tokens for t in s.turns] for s in sessions}
    records, sim = _agentx_in_both(sessions, 12, tmp_path)
    assert all(r["status"] == "ok" for r in records) and len(records) == 12
    markers = {r["session_id"]: r["cache_bust_marker"] for r in records}
    assert len(set(markers.values())) == 4  # one per tree: 2 traces x 2 passes
    assert set(sim) == {(r["session_id"], r["turn"]) for r in records}
    for r in records:
        req = sim[r["session_id"], r["turn"]]
        assert req.input_tokens == r["sent_prompt_tokens"]  # the marker's tokens too
        marker_tokens = r["sent_prompt_tokens"] - inputs[r["session_id"][:2]][r["turn"]]
        ideal = r["ideal_cached_tokens"]
        if r["turn"] == 0:  # a new tree: the system message's 2 blocks, nothing after
            assert ideal == 128 if "#" in r["session_id"] else ideal == 0
            assert req.cached_tokens == ideal
        else:  # its tree's own history: system, marker, the blocks it repeats
            assert req.cached_tokens == ideal - marker_tokens > 128
        # and what the embedded engine served over HTTP cached (its pages of 64 tokens)
        assert req.cached_tokens == r["cached_tokens"]


def test_subagent_streams_split_at_their_trees_marker_on_two_lanes_of_one_trace(tmp_path):
    """A recorded Claude Code trace with subagents (each stream's system prefix declared per
    agent), its two passes on two lanes at once: every request of the simulator caches what
    the replay's ceiling says, less the marker's tokens where its match passes the marker
    (the trace's blocks are its pages), and each new tree's first turn only its system
    blocks."""
    from conftest import TRACES

    from kvbench.workload import load_trace

    sessions = load_trace(TRACES / "claude-code-subagents" / "trace_0282.json.gz")
    inputs = [t.input_tokens for t in sessions[0].turns]
    system = -(-sessions[0].meta["prompt_prefix_tokens"][""] // 64) * 64  # blocks it takes
    records, sim = _agentx_in_both(sessions, 120, tmp_path)
    assert all(r["status"] == "ok" for r in records) and len(records) == 120
    assert any("#1" in r["session_id"] for r in records)  # the second pass ran
    # which of two lanes' parallel streams sent the last requests before the cap is the
    # wall clock's business: the requests both sent
    both = [r for r in records if (r["session_id"], r["turn"]) in sim]
    assert len(both) >= 110
    for r in both:
        req = sim[r["session_id"], r["turn"]]
        marker_tokens = r["sent_prompt_tokens"] - inputs[r["turn"]]
        assert req.input_tokens == r["sent_prompt_tokens"]
        assert r["ideal_cached_tokens"] - req.cached_tokens in (0, marker_tokens)
    first = sim["trace_0282#1", 0]
    assert first.cached_tokens == system  # the system message, nothing of the other tree
