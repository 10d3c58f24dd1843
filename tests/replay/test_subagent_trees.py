"""Subagent trees (issue 34 item 3): a weka trace's subagents become SPAWN/JOIN branches as
agentx-harness 1.0.12 builds them (weka_trace.py `_reconstruct_serial`), run alongside their
parent (workload/tree.py), so a lane of one tree puts several requests in flight, measured
by a real aiohttp server; a lane holds its slot until its whole tree is done."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from time import perf_counter_ns

from conftest import TRACES
from fixtures.servers import free_port, script, stop
from fixtures.transformers_server import wait_http

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, idle, run_replay
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.loader import load_trace
from kvbench.workload.tree import ROOT, TreeRun
from kvbench.workload.weka import parse_session


def _req(t: float, n_in: int, api: float = 1.0, blocks: int | None = None) -> dict:
    return {"t": t, "type": "n", "in": n_in, "out": 4, "api_time": api,
            "hash_ids": list(range(1, (blocks or n_in // 64) + 1))}


def _sub(agent: str, t: float, turns: int, duration_s: float) -> dict:
    return {"t": t, "type": "subagent", "agent_id": agent, "duration_ms": duration_s * 1000,
            "requests": [_req(t + 0.5 + 2 * j, 300 + 64 * j, 1.0) for j in range(turns)]}


def _trace() -> dict:
    """Root turns at t = 0, 10, 20, 30, 40; after turn 0 three subagents (A ends at 6, B at
    15, C at 25); after turn 3 a subagent D that outlives the root (background)."""
    return {"id": "tree", "block_size": 64, "hash_id_scope": "local", "requests": [
        _req(0, 640), _sub("A", 1.0, 2, 5.0), _sub("B", 1.2, 3, 13.8), _sub("C", 1.5, 3, 23.5),
        _req(10, 704), _req(20, 768), _req(30, 832), _sub("D", 31.5, 2, 40.0),
        _req(40, 896)]}


def test_subagents_spawn_and_join_by_their_recorded_times():
    """`_reconstruct_serial`: a subagent is spawned by the root request before it and joined
    by the first later root request that starts at or after its end, in the background when
    none does; siblings of one spawn and join share the earliest start."""
    s = parse_session(_trace(), "tree.json:1")
    by_agent = {b.agent: b for b in s.tree()}
    assert by_agent["A"].spawn == 0 and by_agent["A"].join == 9  # t=10 >= 6
    assert by_agent["B"].join == 10  # t=10 < 15 <= t=20
    assert by_agent["C"].join == 11  # t=30
    assert by_agent["D"].spawn == 11 and by_agent["D"].join is None  # t=40 < 71.5
    # inner times as recorded (absolute), the gap between a stream's turns end-to-start
    a = s.turns[by_agent["A"].first + 1]
    assert a.t_s == 3.5 and a.think_time_s == 1.0  # 3.5 - (1.5 + 1.0)
    assert s.turns[9].think_time_s == 9.0  # root: 10 - (0 + 1)
    assert s.meta["timed"] is True


def _drive(run: TreeRun, request_s: float = 1.0) -> list[tuple[float, int, int, int]]:
    """Every request of a pass, each taking `request_s`: (send time, stream, turn,
    in flight at send)."""
    import heapq

    queue = [(r.at_s, r.k, r.stream) for r in run.start(0.0)]
    heapq.heapify(queue)
    running: list[float] = []
    out = []
    while queue:
        at, k, stream = heapq.heappop(queue)
        running = [e for e in running if e > at]
        running.append(at + request_s)
        out.append((at, stream, k, len(running)))
        run.sent(k)
        for r in run.finished(k, at + request_s):
            heapq.heappush(queue, (r.at_s, r.k, r.stream))
    return out


def test_a_request_waits_for_the_requests_of_other_streams_recorded_before_it():
    """The harness's replay barriers (`Session.after`, tests/workload/test_chains.py checks
    them against its own): on the bundled sessions with chains split off their root, no
    request leaves before the requests it waits for ended, every request leaves, and some
    leave later than their own stream alone would send them."""
    bounds = WorkloadBounds(think_time_cap_s=None)
    later = 0
    for session in load_trace(TRACES / "claude-code-subagents"):
        sent = {k: at for at, _, k, _ in _drive(TreeRun(session, bounds.shaped,
                                                         bounds.think_s))}
        assert sorted(sent) == list(range(len(session.turns))), session.session_id
        for k, before in (session.after or {}).items():
            assert all(sent[p] + 1.0 <= sent[k] + 1e-9 for p in before), (session.session_id, k)
        free = {k: at for at, _, k, _ in _drive(TreeRun(replace(session, after=None),
                                                         bounds.shaped, bounds.think_s))}
        later += sum(sent[k] > free[k] + 1e-9 for k in sent)
    assert later > 0


def test_children_run_alongside_their_parent_and_a_join_waits_for_them():
    s = parse_session(_trace(), "tree.json:1")
    bounds = WorkloadBounds(think_time_cap_s=None)
    run = TreeRun(s, bounds.shaped, bounds.think_s)
    sends = _drive(run)
    assert run.done and len(sends) == len(s.turns)  # every turn once
    assert max(n for *_, n in sends) >= 3  # A, B and C together after root turn 0
    when = {k: at for at, _, k, _ in sends}
    by_agent = {b.agent: b for b in s.tree()}
    # the root's turn 9 waits for A; turn 10 for B (its own think time is shorter)
    a_end = when[by_agent["A"].end - 1] + 1.0
    assert when[9] >= a_end and when[9] == max(a_end, when[0] + 1.0 + 9.0)
    b_end = when[by_agent["B"].end - 1] + 1.0
    assert when[10] == max(b_end, when[9] + 1.0 + s.turns[10].think_time_s)
    # D is spawned by root turn 11 and nothing waits for it: the root's last turn goes on
    assert when[12] < when[by_agent["D"].end - 1]
    assert run.streams[ROOT].state == "done"


def test_an_idle_cap_shift_moves_a_root_blocked_on_its_subagents():
    """The harness keeps a blocked root's own due time as a timer of its tree's group
    (branch_orchestrator.py `_arm_join_replay_deadline`), which the tree's idle cap shifts
    with the rest (loop_scheduler.py `cap_pending_delay_for_group`): released by its
    subagents, it leaves at its due time less the shift, not at the recorded one."""
    s = parse_session(_trace(), "tree.json:1")
    bounds = WorkloadBounds(think_time_cap_s=None)
    runs = [TreeRun(s, bounds.shaped, bounds.think_s) for _ in range(2)]
    released = []
    for shift_s in (0.0, 8.5):
        run = runs[len(released)]
        run.start(0.0)
        run.sent(0)
        spawned = run.finished(0, 1.0)  # root turn 9 is due at 1 + 9 = 10, blocked on A
        assert run.streams[ROOT].state == "blocked"
        run.shift(shift_s)  # the tree sat idle: its timers moved 8.5 s earlier
        a = next(r for r in spawned if s.turns[r.k].agent == "A")
        run.sent(a.k)
        nxt = run.finished(a.k, a.at_s + 0.5)
        run.sent(nxt[0].k)
        out = run.finished(nxt[0].k, 1.4)  # A's last request ends at 1.4
        released.append(next(r.at_s for r in out if r.stream == ROOT))
    assert released == [10.0, 1.5]


def test_an_idle_cap_tells_of_its_shifts():
    heard = []

    async def main():
        cap = idle.IdleCap(0.01, heard.append)
        idle.enter([cap])
        await idle.sleep_until([cap], perf_counter_ns() + 5 * 10**9, None)
        idle.leave([cap])
        return cap.shift_ns

    shifted = asyncio.run(main())
    assert len(heard) == 1 and heard[0] == shifted > 4 * 10**9


def test_a_context_overflow_ends_only_its_stream():
    s = parse_session(_trace(), "tree.json:1")
    bounds = WorkloadBounds(think_time_cap_s=None)
    run = TreeRun(s, bounds.shaped, bounds.think_s)
    ready = run.start(0.0)
    run.sent(0)
    spawned = run.finished(0, 1.0)
    assert {r.stream for r in spawned} == {1, 2, 3} and ready
    assert run.streams[ROOT].state == "blocked"  # its next turn joins A
    a_first = next(r for r in spawned if r.stream == 1)
    run.sent(a_first.k)
    # A ends at its overflow, which releases the root's join (after its own think time)
    released = run.finished(a_first.k, 2.0, stop=True)
    assert run.streams[1].state == "done"
    assert [(r.stream, r.k, r.at_s) for r in released] == [(ROOT, 9, 1.0 + 9.0)]


COUNTING_SERVER = """
import asyncio, json, sys
from aiohttp import web
port = int(sys.argv[1])
state = {"now": 0, "max": 0, "seen": 0}

async def health(_):
    return web.Response(text="ok")

async def models(_):
    return web.json_response({"data": [{"id": "m"}]})

async def stats(_):
    return web.json_response(state)

async def chat(request):
    body = await request.json()
    state["now"] += 1
    state["seen"] += 1
    state["max"] = max(state["max"], state["now"])
    try:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        # held until three are in flight (a fan-out), or 0.5 s for a lone request: siblings
        # overlap however late a loaded client sends the last of them within that window
        for _ in range(50):
            if state["now"] >= 3:
                break
            await asyncio.sleep(0.01)
        n = body.get("max_tokens", 4)
        for _ in range(n):
            await resp.write(b'data: {"choices":[{"delta":{"content":" w"}}]}\\n\\n')
        usage = {"prompt_tokens": 10, "completion_tokens": n}
        await resp.write(("data: " + json.dumps({"choices": [], "usage": usage})
                          + "\\n\\ndata: [DONE]\\n\\n").encode())
        await resp.write_eof()
        return resp
    finally:
        state["now"] -= 1

app = web.Application()
app.router.add_get("/health", health)
app.router.add_get("/v1/models", models)
app.router.add_get("/stats", stats)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def _on_counting_server(tmp_path, trace: dict, **options) -> tuple[ReplayConfig, dict, dict]:
    """Replay `trace` on one lane against the counting server: the config, the run's summary
    and the server's counts."""
    import urllib.request

    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    port = free_port()
    proc = subprocess.Popen([*script(tmp_path, "counting", COUNTING_SERVER), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc=proc)
        cfg = ReplayConfig(url=url, model="m", trace=[path], concurrency=1,
                           output_dir=tmp_path / "out", think_time_cap_s=None,
                           max_tokens_cap=4, **options)
        summary = run_replay(cfg)
        with urllib.request.urlopen(f"{url}/stats") as r:
            return cfg, summary, json.load(r)
    finally:
        stop(proc)


def test_parallel_subagents_put_more_requests_in_flight_than_lanes(tmp_path):
    """One lane, one tree: the root's first turn spawns three subagents that run together,
    so the server sees three requests at once (counted by the server itself); the run's
    summary records the same, and the lane takes no second session before its tree is
    done."""
    cfg, summary, server = _on_counting_server(tmp_path, _trace(), think_time_scale=0.01)
    recs = read_jsonl(tmp_path / "out" / "records.jsonl")
    assert server["seen"] == len(recs) == 15 and all(r["status"] == "ok" for r in recs)
    assert server["max"] >= 3 > cfg.concurrency  # the tree's fan-out, one lane
    assert summary["run"]["inflight"]["max"] == server["max"]
    assert max(r["inflight"] for r in recs) == server["max"]
    agents = {r["agent"] for r in recs if r["inflight"] >= 3}
    assert agents <= {"A", "B", "C", None}


def _pause() -> dict:
    """A root request, a subagent with a 40 s pause between its two requests, and the root's
    next request joining it 0.1 s after its recorded end."""
    return {"id": "pause", "block_size": 64, "requests": [
        _req(0.0, 640, 0.15),
        {"t": 0.2, "type": "subagent", "agent_id": "S", "duration_ms": 40300,
         "requests": [_req(0.3, 300, 0.15), _req(40.3, 364, 0.15)]},
        _req(40.6, 704, 0.15)]}


def test_a_root_blocked_on_its_subagent_moves_with_its_tree_s_idle_cap(tmp_path):
    """Against a real server: the subagent's 40 s pause is cut to the tree's 2 s cap, and
    the root waiting on it (due 0.1 s after the subagent's recorded end) moves with that
    shift, as the harness moves its join deadline (`cap_pending_delay_for_group`): it leaves
    just after the subagent ends, not a second cap later."""
    _on_counting_server(tmp_path, _pause(), tree_idle_cap_s=2.0, max_requests=4)
    recs = read_jsonl(tmp_path / "out" / "records.jsonl")
    assert [(r["agent"], r["status"]) for r in recs] == [
        (None, "ok"), ("S", "ok"), ("S", "ok"), (None, "ok")]
    # when each was due (`t_target_ns`, after the shifts), against the end before it: the
    # subagent's pause is the cap; the root is due 0.1-0.2 s after the subagent ends (its
    # recorded wait, moved by the shift), where without the move the cap would come again
    assert recs[2]["t_target_ns"] - recs[1]["t_last_ns"] > 1.5e9  # the cap, not 39.85 s
    assert recs[3]["t_target_ns"] - recs[2]["t_last_ns"] < 1.5e9  # not the 2 s cap again


def test_the_simulator_replays_the_same_trees():
    """`kvbench simulate`'s closed loop drives the same `TreeRun`: three subagents spawned
    together are in flight together on one lane, in virtual time."""
    import math

    from kvbench.hardware import load_hardware
    from kvbench.sim.costs import CostModel
    from kvbench.sim.simulate import SimSetup, run_sessions

    trace = _trace()
    for sub in trace["requests"][1:4]:  # A, B and C spawned at one instant
        sub["t"] = 1.0
        for j, r in enumerate(sub["requests"]):
            r["t"] = 1.0 + 2 * j
    s = parse_session(trace, "tree.json:1")
    done: list = []
    summary = run_sessions([s], CostModel.reference(load_hardware("h200")),
                           SimSetup(math.inf), WorkloadBounds(concurrency=1,
                                                              think_time_cap_s=None),
                           requests=done)
    assert len(done) == len(s.turns) and summary["requests"] == len(s.turns)
    assert summary["inflight"] == {"max": 3, "lanes": 1}


def test_the_simulator_caps_idle_trees_as_the_replay_does():
    """In virtual time: the subagent's 40 s pause is cut to the tree's cap (2 s) and the
    root blocked on it moves with the shift; the system cap (0.5 s, nothing else in
    flight) cuts it further. Without caps the pause passes as recorded."""
    import math

    from kvbench.hardware import load_hardware
    from kvbench.sim.costs import CostModel
    from kvbench.sim.simulate import SimSetup, run_sessions

    s = parse_session(_pause(), "pause.json:1")
    got = {}
    for caps in ((None, None), (2.0, None), (2.0, 0.5)):
        done: list = []
        run_sessions([s], CostModel.reference(load_hardware("h200")), SimSetup(math.inf),
                     WorkloadBounds(concurrency=1, think_time_cap_s=None, max_requests=4,
                                    tree_idle_cap_s=caps[0], system_idle_cap_s=caps[1]),
                     requests=done)
        done.sort(key=lambda r: r.arrival_s)
        assert [r.meta["agent"] for r in done] == [None, "S", "S", None]
        # the pause before the subagent's second request, the root's wait after it
        got[caps] = (round(done[2].arrival_s - done[1].finish_s, 3),
                     round(done[3].arrival_s - done[2].finish_s, 3))
    pause = got[(None, None)][0]
    assert pause > 39  # end-to-start, as recorded
    assert got[(2.0, None)][0] == 2.0 and got[(2.0, 0.5)][0] == 0.5
    # the root's own due time moved with the shift: it waits after the subagent as long
    # as without caps (0.46 s), not a cap again
    assert got[(2.0, None)][1] == got[(2.0, 0.5)][1] == got[(None, None)][1] < 0.5
