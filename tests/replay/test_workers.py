"""`kvbench replay --workers N` (issue 27 item 11): the lanes sharded over N processes give the
same requests as one process, one merged records.jsonl and one summary; Ctrl-C still ends the
run with a summary and exit 130, and no worker outlives the replay, however it ends. Real
processes throughout: the CLI in a subprocess, the reference SSE server in another."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST_SSE_SERVER, REPO
from fixtures.servers import replay_workers_of, sse_server

from kvbench.replay.workers import merge_client, split

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "http_proxy": "", "https_proxy": ""}



def server(*args: str):
    return sse_server(FAST_SSE_SERVER, *args)


def replay_argv(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kvbench", "replay", "--url", url, "--model", "m",
            "--trace", "synthetic", "--sessions", "8", "--think-time-scale", "0",
            "--max-tokens-cap", "8", "--output", str(out), "--format", "json", *extra]


workers_of = replay_workers_of


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def test_split_and_merged_health():
    assert split(10, 3) == [4, 3, 3] and split(None, 2) == [None, None]
    merged = merge_client([{"loop_lag_ms_p99": 2.0, "cpu_cores": 0.5},
                           {"loop_lag_ms_p99": 14.0, "cpu_cores": 0.95}], 3.0, [])
    assert merged["saturated"] and merged["cpu_cores"] == pytest.approx(1.45)
    assert merged["loop_lag_ms_p99"] == 14.0
    assert merged["reasons"] == ["worker 1: event-loop lag p99 14.0 ms > 10.0 ms",
                                 "worker 1: client CPU 0.95 cores > 0.9"]
    fine = merge_client([{"loop_lag_ms_p99": 2.0, "cpu_cores": 0.5}] * 2, 3.0, [])
    assert not fine["saturated"] and fine["workers"] == [{"loop_lag_ms_p99": 2.0,
                                                          "cpu_cores": 0.5}] * 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_two_workers_send_what_one_does_into_one_records_file(tmp_path):
    with server("--delay", "0.001") as (_, url):
        runs = {}
        for n in (1, 2):
            out = tmp_path / f"w{n}"
            res = subprocess.run(replay_argv(url, out, "--concurrency", "4", "--workers",
                                             str(n)), capture_output=True, text=True,
                                 env=ENV, timeout=120)
            assert res.returncode == 0, res.stderr[-2000:]
            runs[n] = (records(out), json.loads(res.stdout), out)
    (one, s1, _), (two, s2, out2) = runs[1], runs[2]
    # every turn of every session exactly once, in one process or two
    assert len(two) == len(one) == s2["requests"]["total"] == s1["requests"]["total"]
    assert sorted((r["session_id"], r["turn"]) for r in two) == sorted(
        (r["session_id"], r["turn"]) for r in one)
    assert len({r["request_id"] for r in two}) == len(two)
    assert all(r["status"] == "ok" for r in two)
    assert {r["lane"] for r in two} == {0, 1, 2, 3}  # lanes numbered across the workers
    assert len({r["session_id"] for r in two if r["lane"] in (0, 1)} & {
        r["session_id"] for r in two if r["lane"] in (2, 3)}) == 0  # sessions sharded
    assert s2["run"]["workers"] == 2 and s2["run"]["concurrency"] == 4
    assert s2["requests"]["profiled"] == s1["requests"]["profiled"]
    assert s2["tokens"] == s1["tokens"]
    # the corpus is the whole workload's, not the first shard's share of it
    assert s2["run"]["corpus"] == s1["run"]["corpus"]
    assert s2["run"]["corpus"]["sessions"] == 8
    assert len(s2["client"]["workers"]) == 2 and s2["client"]["cpu_cores"] > 0
    assert json.loads((out2 / "summary.json").read_text()) == s2
    assert not (out2 / ".workers").exists() and not workers_of(out2)


def test_a_request_bound_is_shared_out(tmp_path):
    with server("--delay", "0.001") as (_, url):
        out = tmp_path / "cap"
        res = subprocess.run(replay_argv(url, out, "--concurrency", "3", "--workers", "2",
                                         "--max-requests", "25"), capture_output=True,
                             text=True, env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["requests"]["profiled"] == 25 == len(records(out))


def test_more_workers_than_lanes_is_a_usage_error(tmp_path):
    res = subprocess.run(replay_argv("http://127.0.0.1:9", tmp_path / "x", "--concurrency",
                                     "2", "--workers", "3"), capture_output=True, text=True,
                         env=ENV, timeout=60)
    assert res.returncode == 2
    assert "--workers 3 is more than the 2 lanes" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_ctrl_c_merges_what_finished_and_leaves_no_worker(tmp_path):
    out = tmp_path / "int"
    with server("--delay", "0.02") as (_, url):
        proc = subprocess.Popen(replay_argv(url, out, "--concurrency", "8", "--workers", "2",
                                            "--duration", "60"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        end = time.monotonic() + 60
        shards = [out / ".workers" / str(i) / "records.jsonl" for i in (0, 1)]
        while not all(p.is_file() and p.stat().st_size for p in shards):
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < end, "no records from the workers"
            time.sleep(0.05)
        assert len(workers_of(out)) == 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"Traceback" not in err and b"interrupted" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["stopped"] == "interrupted" and summary["run"]["workers"] == 2
    got = records(out)
    assert got and summary["requests"]["total"] == len(got)
    assert {r["lane"] for r in got} >= {0, 7}  # both workers' records merged
    assert not workers_of(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_workers_die_with_a_killed_replay(tmp_path):
    out = tmp_path / "kill"
    with server("--delay", "0.02") as (_, url):
        proc = subprocess.Popen(replay_argv(url, out, "--concurrency", "4", "--workers", "2",
                                            "--duration", "60"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        end = time.monotonic() + 60
        while len(workers_of(out)) < 2:
            assert proc.poll() is None and time.monotonic() < end
            time.sleep(0.05)
        proc.kill()
        proc.wait(10)
        end = time.monotonic() + 10
        while workers_of(out) and time.monotonic() < end:
            time.sleep(0.05)
    assert not workers_of(out), "replay workers outlived their SIGKILLed parent"


def test_the_api_key_reaches_no_file(tmp_path):
    """The workers get the key through a spec file that lives only until they read it."""
    secret = "sk-workers-" + "7" * 24
    with server("--delay", "0.001") as (_, url):
        out = tmp_path / "key"
        res = subprocess.run(replay_argv(url, out, "--concurrency", "2", "--workers", "2",
                                         "--api-key", secret), capture_output=True, text=True,
                             env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert secret not in res.stdout + res.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files and not any(secret.encode() in p.read_bytes() for p in files)


def test_ctrl_c_while_the_workers_start_is_an_interruption(tmp_path, monkeypatch):
    """Ctrl-C that lands while the workers are being started (the first started, the second
    not yet): no more are started, and the replay ends as interrupted (exit 130), not as "a
    replay worker did not start" with a traceback (the CI flake of a SIGINT during start-up)."""
    from kvbench.errors import ReplayInterrupted
    from kvbench.replay import ReplayConfig
    from kvbench.replay import workers as workers_mod
    from kvbench.replay.runner import run_replay
    from kvbench.workload.synthetic import SyntheticSpec

    started: list[int] = []
    real_start = workers_mod._Worker.start

    async def start(self) -> None:
        await real_start(self)
        started.append(self.index)
        os.kill(os.getpid(), signal.SIGINT)  # the run's own handler takes it (catch_sigint)
        await asyncio.sleep(0.2)

    monkeypatch.setattr(workers_mod._Worker, "start", start)
    cfg = ReplayConfig(url="http://127.0.0.1:9", model="m", output_dir=tmp_path / "out",
                       synthetic=SyntheticSpec(num_sessions=4, seed=1, scale=0.02),
                       concurrency=2, workers=2, max_requests=4,
                       max_tokens_cap=2)
    with pytest.raises(ReplayInterrupted):
        run_replay(cfg)
    assert started == [0]
    assert not workers_of(tmp_path / "out")
