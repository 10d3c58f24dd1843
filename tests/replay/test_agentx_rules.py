"""AgentX's replay rules in the client itself (issue 24 item 3): the system idle cap moves
every pending think time when nothing is in flight, and a context overflow is its own kind
of error that ends its session. Against the reference SSE server and a real aiohttp server
that refuses every prompt as too long."""

from __future__ import annotations

import math
import subprocess

from fixtures.servers import free_port, script, stop
from fixtures.transformers_server import wait_http

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, run_replay
from kvbench.workload import SyntheticSpec

# one-minute think times, never zero: without the cap six turns take minutes
SLOW_THINKERS = SyntheticSpec(num_sessions=2, seed=1, think_mu=math.log(60.0), think_sigma=0,
                              zero_think_frac=0, turns_mu=math.log(4), turns_sigma=0,
                              scale=0.01, subagent_prob=0)


def test_the_system_idle_cap_shifts_think_times_when_nothing_is_in_flight(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="m", synthetic=SLOW_THINKERS, concurrency=2,
                       max_requests=6, output_dir=tmp_path, max_tokens_cap=4,
                       think_time_cap_s=300, system_idle_cap_s=0.25)
    summary = run_replay(cfg)  # not the 4+ minutes of recorded think time: shifted, said below
    run = summary["run"]
    assert run["system_idle_cap_s"] == 0.25 and run["idle_shifts"] >= 2
    assert run["idle_shifted_s"] > 100  # minutes of think time skipped, in total
    recs = [r for r in read_jsonl(tmp_path / "records.jsonl") if r["t_target_ns"]]
    assert recs and all(r["status"] == "ok" for r in recs)
    # a turn's target is where the shifted timer stood: no send is minutes before its target
    # (how late a send is depends on the machine's load: not asserted)
    assert all(r["t_send_ns"] - r["t_target_ns"] > -0.2e9 for r in recs)


def test_without_the_cap_think_times_stand(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="m", synthetic=SLOW_THINKERS, concurrency=2,
                       duration_s=1.5, output_dir=tmp_path, max_tokens_cap=4,
                       think_time_cap_s=300)
    summary = run_replay(cfg)
    assert summary["run"]["idle_shifts"] == 0
    # each session's first turn only: the second is a minute away
    recs = read_jsonl(tmp_path / "records.jsonl")
    assert summary["requests"]["total"] == 2, [(r["session_id"], r["turn"]) for r in recs]


OVERFLOW_SERVER = """
import sys
from aiohttp import web
port = int(sys.argv[1])

async def health(_):
    return web.Response(text="ok")

async def chat(request):
    await request.read()
    return web.json_response({"object": "error", "message": "This model's maximum context "
                              "length is 128 tokens. However, your request has 9000 input "
                              "tokens.", "type": "BadRequestError", "code": 400}, status=400)

app = web.Application()
app.router.add_get("/health", health)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def test_a_context_overflow_ends_its_session_and_is_not_a_failure(tmp_path):
    port = free_port()
    proc = subprocess.Popen([*script(tmp_path, "overflow", OVERFLOW_SERVER), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc=proc)
        cfg = ReplayConfig(url=url, model="m", synthetic=SLOW_THINKERS.model_copy(
                               update={"think_mu": 0.0, "zero_think_frac": 1.0}),
                           concurrency=1, max_requests=6, output_dir=tmp_path / "out",
                           think_time_scale=0, end_session_on_context_overflow=True,
                           profile="agentx")
        summary = run_replay(cfg)
        recs = read_jsonl(tmp_path / "out" / "records.jsonl")
        assert {r["error_kind"] for r in recs} == {"context_overflow"}
        # every session (each pass of one) sent its first turn and stopped there
        assert {r["turn"] for r in recs} == {0}
        assert len({r["session_id"] for r in recs}) == len(recs) == 6
        checks = summary["profile"]["checks"]
        assert checks["context_overflow"]["passed"] is False
        assert checks["context_overflow"]["value"] == 1.0
        assert checks["failed_ratio"]["passed"] is False  # nothing but overflows finished
        assert summary["requests"]["errors_by_kind"] == {"context_overflow": 6}
    finally:
        stop(proc)
