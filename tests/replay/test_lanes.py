"""Lane semantics and the HTTP client's edge cases against a scripted raw HTTP server."""

from __future__ import annotations

import asyncio
import json

import pytest

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, replay
from kvbench.workload import SyntheticSpec, generate_sessions

EVENTS = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'] + [
    b'data: {"choices":[{"delta":{"content":" w%d"}}]}\n\n' % i for i in range(5)
] + [b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9,'
     b'"prompt_tokens_details":{"cached_tokens":3}}}\n\n', b"data: [DONE]\n\n"]


class Scripted:
    """Answers each request with EVENTS, framed and written in the given style."""

    def __init__(self, style: str, status: int = 200, events: list[bytes] | None = None) -> None:
        self.style = style
        self.events = events or EVENTS
        self.status = status
        self.heads: list[str] = []
        self.bodies: list[dict] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                text = head.decode()
                length = int(text.lower().split("content-length:")[1].split("\r\n")[0])
                self.heads.append(text)
                self.bodies.append(json.loads(await reader.readexactly(length)))
                await self._answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _answer(self, w: asyncio.StreamWriter) -> None:
        if self.status != 200:
            body = b'{"error":"boom"}'
            w.write(b"HTTP/1.1 %d Oops\r\nContent-Length: %d\r\n\r\n" % (self.status, len(body))
                    + body)
            await w.drain()
            return
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        payload = b"".join(self.events)
        if self.style == "one_frame":  # several events per read
            raw = b"%x\r\n" % len(payload) + payload + b"\r\n0\r\n\r\n"
            w.write(raw)
        else:  # one frame per event, written a few bytes at a time
            raw = b"".join(b"%x\r\n" % len(e) + e + b"\r\n" for e in self.events)
            raw += b"0\r\n\r\n"
            for i in range(0, len(raw), 7):
                w.write(raw[i:i + 7])
                await w.drain()
                await asyncio.sleep(0.0005)
        await w.drain()


async def _run(server: Scripted, tmp_path, **kw) -> tuple[dict, list[dict]]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=tmp_path,
                       # the scripted servers answer up to 9 completion tokens: ask for 16 (a
                       # usage above max_tokens is an impossible one, a failed request)
                       synthetic=SyntheticSpec(num_sessions=3, scale=0.002, max_turns=4,
                                               output_mu=9.0, output_sigma=0.0),
                       think_time_scale=0, **kw)
    async with srv:
        summary = await replay(cfg)
    return summary, read_jsonl(tmp_path / "records.jsonl")


@pytest.mark.parametrize("style", ["one_frame", "trickle"])
def test_stream_framing_styles_give_the_same_record(tmp_path, style):
    server = Scripted(style)
    summary, recs = asyncio.run(_run(server, tmp_path, concurrency=2, max_requests=4))
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "ok", r
        assert len(r["chunk_ns"]) == 5  # the role-only delta is not content
        assert r["completion_tokens"] == 9 and sum(r["chunk_tokens"]) == 9
        assert r["chunk_tokens_source"] == "estimated"
        assert (r["prompt_tokens"], r["cached_tokens"]) == (7, 3)
    assert summary["cache"]["hit_rate"] == pytest.approx(3 / 7)
    # correlation header carries the session id; bodies ask for usage and stream
    assert all("X-Session-ID: synthetic-" in h for h in server.heads)
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True}
               for b in server.bodies)


# SGLang 0.5.17 with --enable-cache-report leaves prompt_tokens_details out of the usage when
# nothing was cached (srt/entrypoints/openai/usage_processor.py:13-15, _details_if_cached)
SGLANG_NO_HIT = [*EVENTS[:-2],
                 b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9,'
                 b'"total_tokens":16}}\n\n', b"data: [DONE]\n\n"]


@pytest.mark.parametrize(("absent_is_zero", "cached", "hit_rate"), [(True, 0, 0.0),
                                                                    (False, None, None)])
def test_a_usage_without_cached_tokens_counts_zero_only_where_the_engine_means_it(
        tmp_path, absent_is_zero, cached, hit_rate):
    server = Scripted("one_frame", events=SGLANG_NO_HIT)
    summary, recs = asyncio.run(_run(server, tmp_path, concurrency=1, max_requests=2,
                                     absent_cached_tokens_are_zero=absent_is_zero))
    assert [(r["status"], r["cached_tokens"]) for r in recs] == [("ok", cached)] * 2
    assert summary["cache"]["hit_rate"] == hit_rate
    assert summary["cache"]["prompt_tokens"] == (14 if absent_is_zero else None)


def test_http_errors_are_records_not_exceptions(tmp_path):
    summary, recs = asyncio.run(_run(Scripted("one_frame", status=500), tmp_path,
                                     max_requests=3))
    assert [r["error_kind"] for r in recs] == ["http_500"] * 3
    assert summary["requests"]["errors_by_kind"] == {"http_500": 3}


def test_connection_refused_is_recorded_and_bounded(tmp_path):
    cfg = ReplayConfig(url="http://127.0.0.1:9", model="m", output_dir=tmp_path,
                       synthetic=SyntheticSpec(num_sessions=1, scale=0.002, max_turns=2),
                       think_time_scale=0, max_requests=2)
    summary = asyncio.run(replay(cfg))
    assert summary["requests"]["errors_by_kind"] == {"connect": 2}


def test_sampled_start_sends_one_warm_up_request_per_lane(tmp_path):
    """Sessions without recorded times split by turn count as agentx-harness 1.0.12 does
    (trajectory_source.py `_build_trajectory_for_lane`): turn k is the lane's warm-up request,
    with its history and one output token, and the profiled turns follow it."""
    server = Scripted("one_frame")
    summary, recs = asyncio.run(_run(server, tmp_path, concurrency=3, start="sampled",
                                     warmup_requests=0, seed=5))
    warm = [r for r in recs if r["is_warmup"]]
    assert len(warm) == 3 and summary["requests"]["warmup"] == 3
    assert {r["max_tokens"] for r in warm} == {1}
    sessions = generate_sessions(SyntheticSpec(num_sessions=3, scale=0.002, max_turns=4))
    for r in warm:
        later = [x["turn"] for x in recs if x["session_id"] == r["session_id"]
                 and not x["is_warmup"]]
        n = next(s.num_turns for s in sessions if s.session_id == r["session_id"])
        assert later == list(range(r["turn"] + 1, n))  # every turn after it, once
    assert summary["run"]["warmup_s"] > 0
    assert summary["run"]["profiling_started_ns"] > max(r["t_send_ns"] for r in warm)


def test_a_huge_sse_line_needs_no_buffer_tuning(tmp_path):
    # 1 MiB of content in one event: aiohttp's 128 KiB line limit and 64 KiB read buffer
    # broke peers on long contexts; here there is no limit to hit
    big = b'data: {"choices":[{"delta":{"content":"' + b"x" * (1 << 20) + b'"}}]}\n\n'
    events = [big, b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n']
    summary, recs = asyncio.run(_run(Scripted("one_frame", events=events), tmp_path,
                                     max_requests=2, keep_text=True))
    assert [len(r["text"]) for r in recs] == [1 << 20, 1 << 20]
    assert summary["requests"]["errors"] == 0


def test_completions_send_token_ids_of_exact_length(tmp_path):
    from fixtures.tiny_model import build_tokenizer

    tok_dir = tmp_path / "tok"
    build_tokenizer(tok_dir)
    server = Scripted("one_frame", events=[
        b'data: {"choices":[{"text":" a"}]}\n\n',
        b'data: {"choices":[{"text":" b","finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'])
    summary, recs = asyncio.run(_run(server, tmp_path / "out", endpoint="completions",
                                     tokenizer=str(tok_dir), max_requests=3))
    assert summary["run"]["prompt_token_ids"] is True
    for body, rec in zip(server.bodies, recs, strict=True):
        assert all(isinstance(t, int) for t in body["prompt"])
        assert len(body["prompt"]) == rec["sent_prompt_tokens"]
        assert rec["status"] == "ok" and len(rec["chunk_ns"]) == 2
        assert rec["finish_reason"] == "length"
