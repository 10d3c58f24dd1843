"""agentx-harness 1.0.12, run for real, is the oracle of `kvbench replay --profile agentx`
(issue 34 item 4): both replay tests/data/traces/agentx-small (parallel subagents) against
one `kvbench serve-sim` that counts prompts with the tokenizer both synthesise them with,
through benchmarks/agentx_oracle.py (the docs/performance.md table is its larger run). The
harness is installed by .ci/install in its own virtual environment.

The server's context (2,010 tokens) lets every warm-up request through and refuses one
profiled root request, in both runs: the oracle of the failed ratio and the context-overflow
rate as the harness exports them. The harness exports its request bodies (`--bodies`) and
kvbench replays with the harness's run id, so every request's cache-bust marker and prompt
are compared.

Cost: one harness run (about 30 s of its own start-up, dataset build and drain) and one
kvbench run, each with a 6 s profiling phase: 7 s of CPU for the script, about a minute of
wall time on two busy cores."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, TRACES
from fixtures.servers import free_port, stop
from fixtures.transformers_server import wait_http

ORACLE = REPO / "benchmarks" / "agentx_oracle.py"
VENV = os.environ.get("KVBENCH_AGENTX_VENV") or os.path.expanduser(
    "~/.cache/kvbench/agentx-harness-1.0.12")


@pytest.fixture()
def sim_server(tiny_model, tmp_path):
    port = free_port()
    log = open(tmp_path / "serve-sim.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "serve-sim", "--port", str(port), "--tokenizer",
         str(tiny_model), "--time-scale", "1", "--context-tokens", "2010"],
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()


def test_kvbench_sends_what_the_harness_sends(sim_server, tiny_model, tmp_path):
    if not os.path.exists(os.path.join(VENV, "bin", "aiperf")):
        pytest.fail(f"agentx-harness 1.0.12 is not installed at {VENV}: run .ci/install")
    out = tmp_path / "oracle"
    proc = subprocess.run(
        [sys.executable, str(ORACLE), "--traces", str(TRACES / "agentx-small"),
         "--tokenizer", str(tiny_model), "--concurrency", "2", "--duration", "6",
         "--warmup-per-lane", "2", "--repeats", "1", "--url", sim_server,
         "--model", "reference-8b", "--harness-venv", VENV, "--lean", "--bodies",
         "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "oracle.json").read_text())
    run = result["runs"][0]
    h, k, agree = run["harness"], run["kvbench"], run["agreement"]
    # the same t* requests, then the same one-token requests per lane (seed 42 both)
    assert agree["warmup_equal"], (h["warmup"], k["warmup"])
    assert len(h["warmup"]) >= 2 + 2 * 2
    # every session stream sends the same turns in the profiling phase
    assert agree["streams_equal"] == agree["streams"] >= 2, agree["streams_differing"]
    # the same prompts, the cache-bust marker included: kvbench run with the harness's run id
    # sends each tree the harness's marker (`[rid:<12 hex>]`, timing/strategies/
    # cache_bust.py:106-111), and each request (phase, stream, turn) with that marker has the
    # prompt tokens the server counts for the harness's, or one more: the harness's text is
    # its corpus's tokens cut for another tokenizer, and re-encoded with this one a message
    # of it can come out a token short of the trace (measured: oracle_002 turn 0's message is
    # 520 tokens after the 19 of the marker, the trace records 521); the harness's marker
    # opens its first user message (kvbench's: tests/workload/test_messages.py)
    prompts = agree["prompts"]
    assert prompts["same_marker"] >= min(prompts["harness"], prompts["kvbench"]) - 2, prompts
    assert prompts["same_marker"] >= 2 + 2 * 2, prompts
    assert set(prompts["token_deltas"]) <= {"0", "1"}, prompts
    assert prompts["same_tokens"] > prompts["same_marker"] / 2, prompts
    assert all(p[3].startswith("[rid:") for p in h["prompts"] + k["prompts"])
    assert h["markers_open_first_user"] and all(h["markers_open_first_user"])
    # both keep their lanes full; how far subagents alongside their parent push the peak past
    # the lanes depends on when each response ends (a loaded machine moved it 3 vs 2 here),
    # so the peak itself is proven where the server decides it: test_subagent_trees.py's
    # counting server holds requests until the tree's siblings are all in flight
    assert h["max_inflight"] >= 2 and k["max_inflight"] >= 2
    for r in (h, k):
        assert 0 < r["inflight_mean"] <= r["max_inflight"]
        assert 0 <= r["above_lanes_share"] < 1
    # one profiled root request over the server's context, in both: not a failure in the
    # failed ratio (the harness exports it apart), but above the 1% overflow limit
    assert h["overflows"] == k["overflows"] == 1
    assert h["verdict"]["failed_ratio"] == k["verdict"]["failed_ratio"] == 0
    # neither is a submission: a 6 s phase of local traces (the harness needs
    # --unsafe-override for both; kvbench names them) with too many overflows
    assert h["verdict"]["submission_valid"] is False is k["verdict"]["submission_valid"]
    assert h["verdict"]["reasons"] == ["unsafe_override", "context_overflow_rate_exceeded"]
    reasons = {r.split(":")[0] for r in k["verdict"]["reasons"]}
    assert {"duration", "corpus", "context_overflow"} <= reasons

    # the runs' own files compared again (--rescore: how a GPU call's runs brought back are
    # compared by a newer oracle) give the same comparison
    again = subprocess.run(
        [sys.executable, str(ORACLE), "--rescore", "--traces", str(TRACES / "agentx-small"),
         "--tokenizer", str(tiny_model), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    rescored = json.loads((out / "oracle.json").read_text())["runs"][0]
    assert rescored == json.loads(json.dumps(run))


def _oracle_module():
    spec = importlib.util.spec_from_file_location("agentx_oracle", ORACLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_inflight_over_time():
    """Requests in flight over the profiled span (ns): one long request, and two short ones
    that overlap it and each other, 2 lanes: 3 at once for 1 of 10 units."""
    recs = [{"start_ns": 0, "end_ns": 10}, {"start_ns": 2, "end_ns": 4},
            {"start_ns": 3, "end_ns": 5}]
    got = _oracle_module().inflight(recs, lanes=2)
    assert got["max_inflight"] == 3
    assert got["inflight_mean"] == pytest.approx((2 * 1 + 1 * 2 + 1 * 3 + 1 * 2 + 5 * 1) / 10)
    assert got["above_lanes_share"] == pytest.approx(0.1)
    assert _oracle_module().inflight([], lanes=2) == {
        "max_inflight": 0, "inflight_mean": None, "above_lanes_share": None}


def test_paired_ttft_pools_the_same_requests():
    """The same requests' TTFT differences over all pairs: a 2 ms offset on every request is
    found, where the pairs' p50s (50 and 90 ms) could not tell it from noise."""
    oracle = _oracle_module()
    runs = [{"agreement": {"ttft_deltas_ms": [2.0 + 0.01 * i for i in range(-10, 11)]},
             "harness": {"ttft_p50_ms": p50}} for p50 in (50.0, 90.0)]
    got = oracle.paired_ttft(runs)
    assert got["requests"] == 42 and got["median_ms"] == pytest.approx(2.0)
    assert got["interval_ms"][0] > 1.8 and got["interval_ms"][1] < 2.2
    assert got["within_noise"] is False and got["harness_ttft_p50_ms"] == 70.0
    assert oracle.paired_ttft([{"agreement": {"ttft_deltas_ms": [1.0]}}]) is None
