"""Keep-alive safety against a real aiohttp server that closes idle connections after 1 s, with
think times around 1 s: the server's close races the lane's next write. Every request must
still complete: a reused connection closed before any response byte is resent once on a fresh
one, and a connection idle past the advertised `Keep-Alive: timeout` is not reused at all.

Also the token streams that carry no text (partial UTF-8 under incremental detokenization,
special tokens, random weights): timed from their first token-bearing event, never "empty"."""

from __future__ import annotations

import asyncio
import json
import random

import orjson
import pytest
from aiohttp import web

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, replay
from kvbench.workload.session import Session, Turn

KEEPALIVE_S = 1.0
TOKENS = 4


def _app(advertise: bool, empty_text: bool) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if advertise:
            resp.headers["Keep-Alive"] = f"timeout={int(KEEPALIVE_S)}"
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
        for i in range(TOKENS):
            # with empty_text, every token's text is held back (no complete UTF-8 sequence)
            content = "" if empty_text else f" w{i}"
            await resp.write(b"data: " + orjson.dumps(
                {"choices": [{"delta": {"content": content}, "finish_reason": None}]}) + b"\n\n")
            await asyncio.sleep(0.002)
        usage = {"prompt_tokens": 10, "completion_tokens": TOKENS,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        await resp.write(b"data: " + orjson.dumps(
            {"choices": [{"delta": {}, "finish_reason": "length"}]}) + b"\n\n")
        await resp.write(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        assert body["stream"] is True
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, keepalive_timeout=KEEPALIVE_S, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def _sessions(n: int, turns: int, seed: int) -> list[Session]:
    rng = random.Random(seed)
    # think times straddle the server's 1 s idle timeout, so closes race the next write
    return [Session(f"s{i}", [Turn(64, TOKENS, (i * 100 + k,), 64,
                                   think_time_s=rng.uniform(0.85, 1.15))
                              for k in range(turns)], namespace=f"n{i}")
            for i in range(n)]


async def _run(tmp_path, advertise: bool, empty_text: bool = False, lanes: int = 24,
               turns: int = 12) -> tuple[dict, list[dict]]:
    runner, url = await _serve(_app(advertise, empty_text))
    try:
        cfg = ReplayConfig(url=url, model="m", concurrency=lanes, output_dir=tmp_path,
                           correlation_header=None)
        summary = await replay(cfg, sessions=_sessions(lanes, turns, seed=7))
    finally:
        await runner.cleanup()
    return summary, read_jsonl(tmp_path / "records.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("advertise", [False, True], ids=["silent-server", "advertised"])
def test_no_transport_errors_when_the_server_closes_idle_connections(tmp_path, advertise):
    summary, records = asyncio.run(_run(tmp_path, advertise))
    assert len(records) == 24 * 12  # hundreds of requests
    bad = [r for r in records if r["status"] != "ok"]
    assert bad == [], json.dumps(bad[:3])
    conns = summary["run"]["connections"]
    if advertise:
        # idle past timeout=1 minus the margin: reopened before sending, never raced
        assert conns["reopened_idle"] > 0
        assert conns["opened"] >= 24 + conns["reopened_idle"]
    else:
        # the server's closes were seen (a closed connection is reopened) or raced (resent)
        assert conns["opened"] > 24
    assert summary["requests"]["errors"] == 0


def test_streams_of_empty_text_tokens_are_timed_not_empty(tmp_path):
    _, records = asyncio.run(_run(tmp_path, advertise=True, empty_text=True, lanes=2,
                                  turns=2))
    assert len(records) == 4
    for r in records:
        assert r["status"] == "ok", r["error"]
        # the role-only opening event and the finish-only event carry no token
        assert len(r["chunk_ns"]) == TOKENS
        assert r["t_first_ns"] == r["chunk_ns"][0]
        assert sum(r["chunk_tokens"]) == TOKENS


def test_a_stream_without_tokens_is_empty():
    from kvbench.replay.http import Response
    from kvbench.replay.request import build_record

    events = (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
              b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}\n\n'
              b"data: [DONE]\n\n")
    rec = build_record(Response(200, {}, [(5, events)], 5), chat=True, keep_text=False)
    assert (rec["status"], rec["error_kind"]) == ("error", "empty")
    # usage that counts tokens which no event carried: timed at the usage event, not empty
    counted = events.replace(b'"completion_tokens":0', b'"completion_tokens":2')
    rec = build_record(Response(200, {}, [(5, counted)], 5), chat=True, keep_text=False)
    assert rec["status"] == "ok" and rec["chunk_tokens"] == [2] and rec["t_first_ns"] == 5


def test_keepalive_header_parsing():
    from kvbench.replay.http import _keepalive_timeout

    assert _keepalive_timeout("timeout=5, max=100") == 5.0
    assert _keepalive_timeout("max=100") is None
    assert _keepalive_timeout("timeout=x") is None
