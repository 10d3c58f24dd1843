"""The client against the reference fast SSE server: exact chunk and token accounting."""

from __future__ import annotations

import json
import subprocess
import sys
from time import perf_counter_ns

from conftest import REPO, TRACES

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, run_replay
from kvbench.workload import SyntheticSpec


def test_synthetic_run_counts_every_chunk(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=4, max_requests=24,
                       warmup_requests=4, output_dir=tmp_path,
                       synthetic=SyntheticSpec(num_sessions=6, scale=0.02), think_time_scale=0,
                       max_tokens_cap=12)
    summary = run_replay(cfg)
    recs = read_jsonl(tmp_path / "records.jsonl")
    assert len(recs) == 28 and summary["requests"]["profiled"] == 24
    assert summary["requests"]["warmup"] == 4
    for r in recs:
        assert r["status"] == "ok", r
        # one token per chunk: the server sends max_tokens chunks and reports them in usage
        assert r["completion_tokens"] == r["max_tokens"] == len(r["chunk_ns"])
        # the server counts whitespace words, the unit of tokenizer-less prompts
        assert r["prompt_tokens"] == r["sent_prompt_tokens"]
        assert r["t_send_ns"] < r["t_first_ns"] <= r["t_last_ns"]
        assert r["chunk_ns"] == sorted(r["chunk_ns"])
    assert json.loads((tmp_path / "summary.json").read_text())["requests"]["total"] == 28


def test_mooncake_trace_and_duration_bound(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=3, duration_s=1.5,
                       output_dir=tmp_path, block_tokens=4, max_tokens_cap=4,
                       trace=[TRACES / "mooncake" / "synthetic_trace.jsonl.gz"],
                       think_time_cap_s=0.05, grace_s=5)
    summary = run_replay(cfg)
    assert summary["requests"]["profiled"] > 3
    assert summary["requests"]["errors"] == 0
    # the trace spans 1,022 s: ended by the 1.5 s bound and its 5 s grace, with room for a
    # loaded machine that is still far from the trace's own length
    assert summary["run"]["elapsed_s"] < 1.5 + 5 + 120


def test_cli_replay_json(sse_server, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "replay", "--url", sse_server, "--trace",
         str(TRACES / "claude-code" / "trace_0165.json.gz"), "--concurrency", "2",
         "--max-requests", "6", "--output", str(tmp_path), "--block-tokens", "2",
         "--max-tokens-cap", "5", "--think-time-cap", "0", "--format", "json"],
        capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "src")}, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["requests"]["profiled"] == 6
    assert summary["run"]["model"] == "fake-model"  # read from /v1/models


def test_cli_bad_trace_path_is_a_clear_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "replay", "--url", "http://127.0.0.1:9",
         "--model", "m", "--trace", str(tmp_path / "missing"), "--output", str(tmp_path)],
        capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "src")}, timeout=60)
    assert out.returncode == 2
    err = " ".join(out.stderr.split())
    assert "no such trace file" in err and "Traceback" not in err


def test_gc_is_frozen_for_the_replay_and_released_after(sse_server, tmp_path, monkeypatch):
    """What exists before the replay is out of the collector's reach while it runs (a full
    collection over a sweep's heap took 48-60 ms in the quickstart: loop lag), and given back
    after, so the next job of a sweep can free it."""
    import gc

    from kvbench.replay import runner

    calls = []

    class Recorder:
        def freeze(self):
            calls.append(("freeze", len(list(tmp_path.glob("records.jsonl")))))
            gc.freeze()

        def unfreeze(self):
            calls.append(("unfreeze", len(read_jsonl(tmp_path / "records.jsonl"))))
            gc.unfreeze()

    monkeypatch.setattr(runner, "gc", Recorder())
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=2, max_requests=6,
                       output_dir=tmp_path, synthetic=SyntheticSpec(num_sessions=3, scale=0.02),
                       think_time_scale=0, max_tokens_cap=4)
    run_replay(cfg)
    # frozen before the first request was written (the trace, then the prepared contexts),
    # released once all six were
    assert calls == [("freeze", 1), ("freeze", 1), ("unfreeze", 6)]
    assert gc.get_freeze_count() == 0


def _render_and_send_times(sse_server, tmp_path, monkeypatch, **cfg_over):
    """Replay trace_0165 with two lanes and return, per turn that followed a predecessor whose
    next turn it was: when its rendering was started (the prefetch task made as the turn
    before was sent), its target send time, and whether that task is what rendered it. When
    the task first runs, and when it ends, is also the machine's speed (a tiny response can be
    read before it runs), which a test on a loaded CI machine cannot assert; that it is made
    before the predecessor's request is written, and renders the turn, is the client's design."""
    import asyncio

    from kvbench.replay.lanes import Lanes

    renderer, sent, ahead = {}, [], {}
    real_warm, real_one, real_prefetch = Lanes._warm, Lanes._one, Lanes._prefetch

    async def warm(self, stream, turn, namespace, *rest):
        renderer.setdefault((namespace, id(turn)), asyncio.current_task())  # its first call
        await real_warm(self, stream, turn, namespace, *rest)

    def prefetch(self, tree, r):
        task = real_prefetch(self, tree, r)
        if task is not None:  # the stream's next turn, known when this one is sent
            st = tree.run.streams[r.stream]
            key = (tree.namespace, id(tree.run.turns[st.turns[st.pos + 1]]))
            ahead.setdefault(key, (perf_counter_ns(), task))
        return task

    async def one(self, lane, key, k, turn, namespace, target, is_warmup, *rest):
        sent.append(((namespace, id(turn)), target))
        return await real_one(self, lane, key, k, turn, namespace, target, is_warmup, *rest)

    monkeypatch.setattr(Lanes, "_warm", warm)
    monkeypatch.setattr(Lanes, "_one", one)
    monkeypatch.setattr(Lanes, "_prefetch", prefetch)
    run_replay(ReplayConfig(url=sse_server, model="fake-model", concurrency=2, max_requests=8,
                            output_dir=tmp_path,
                            trace=[TRACES / "claude-code" / "trace_0165.json.gz"],
                            block_tokens=2, max_tokens_cap=2, **cfg_over))
    # a turn whose next turn was known when it was sent (every one of trace_0165's turns that
    # follows another: 6 of the 8 sent; a turn that waits on a subagent's end would not be)
    followed = [(key, target) for key, target in sent if target is not None]
    assert len(followed) >= 4 and all(key in ahead for key, _ in followed), (sent, ahead)
    return [(ahead[key][0], target, renderer[key] is ahead[key][1]) for key, target in followed]


def test_a_turns_first_seen_blocks_are_rendered_during_its_think_time(sse_server, tmp_path,
                                                                        monkeypatch):
    """A turn that follows a think time has its prompt text ready when it is due, as an
    agent's is: its rendering is started before the target send time, by the task the turn
    before started, so send lateness measures the client missing the schedule, not text
    synthesis."""
    times = _render_and_send_times(sse_server, tmp_path, monkeypatch, think_time_cap_s=0.2)
    assert all(began < target and by_prefetch for began, target, by_prefetch in times), times


def test_with_no_think_time_the_next_turn_is_rendered_while_this_one_is_in_flight(
        sse_server, tmp_path, monkeypatch):
    """No think time (the quickstart's): turn k+1's first-seen blocks are rendered by a task
    started as turn k is sent, before turn k ends (its target); before, the rendering began
    after it and a 68K-token context counted 29 ms against send lateness (issue 27 item 10)."""
    times = _render_and_send_times(sse_server, tmp_path, monkeypatch, think_time_scale=0.0)
    assert all(began < target and by_prefetch for began, target, by_prefetch in times), times
