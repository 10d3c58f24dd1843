"""`serve-sim` end to end: 64 concurrent streaming sessions built from a real trace, usage
with cached tokens equal to the trace's reuse, and /metrics that prometheus_client parses."""

from __future__ import annotations

import asyncio
import gzip
import json
import math

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from sim.conftest import CLAUDE_CODE

from kvbench.hardware import load_hardware
from kvbench.sim.costs import CostModel
from kvbench.sim.server import ServerConfig, SimServer, build_app

PAGE = 64
BLOCKS_PER_PROMPT = 24  # a prefix of each request keeps the payloads small
MAX_TOKENS = 6


def block_text(scope: str, hash_id: int) -> str:
    """One 64-token block (one word token each, as the replay client synthesises them):
    exactly one page."""
    return "".join(f" w{scope}x{hash_id}y{i}" for i in range(PAGE))


def sessions(n: int) -> list[tuple[str, list[list[int]]]]:
    out = []
    for path in sorted(CLAUDE_CODE.glob("trace_*.json.gz"))[:n]:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        turns = [r["hash_ids"][:BLOCKS_PER_PROMPT] for r in doc["requests"][:3]]
        out.append((path.name.split(".")[0], turns))  # trace_0001: one word
    return out


def expected_cached(turns: list[list[int]]) -> list[int]:
    seen: set[tuple] = set()
    out = []
    for ids in turns:
        out.append(PAGE * max(i for i in range(len(ids) + 1) if i == 0 or tuple(ids[:i]) in seen))
        seen.update(tuple(ids[:i]) for i in range(1, len(ids) + 1))
    return out


async def stream_one(http: aiohttp.ClientSession, base: str, prompt: str) -> dict:
    body = {"model": "sim", "prompt": prompt, "max_tokens": MAX_TOKENS, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks, usage, done = 0, None, False
    async with http.post(f"{base}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            msg = json.loads(line[6:])
            assert "error" not in msg, msg
            if msg.get("usage"):
                usage = msg["usage"]
            chunks += sum(1 for c in msg["choices"] if c.get("text"))
    assert done and usage is not None
    return {"chunks": chunks, "usage": usage}


async def start(config: ServerConfig) -> tuple[web.AppRunner, str]:
    server = SimServer(config, CostModel.reference(load_hardware("h200")))
    runner = web.AppRunner(build_app(server))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def test_64_concurrent_streaming_sessions_from_a_real_trace():
    config = ServerConfig(served_model_name="sim", gpu_tokens=math.inf, host_tokens=100_000,
                          page_tokens=PAGE, time_scale=200.0)

    async def main() -> tuple[list, str]:
        runner, base = await start(config)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/health") as r:
                    assert r.status == 200

                async def session(scope: str, turns: list[list[int]]) -> list[dict]:
                    results = []
                    for ids in turns:
                        prompt = "".join(block_text(scope, h) for h in ids) + " tail"
                        results.append(await stream_one(http, base, prompt))
                    return results

                work = sessions(64)
                results = await asyncio.wait_for(
                    asyncio.gather(*(session(s, t) for s, t in work)), timeout=120)
                async with http.get(f"{base}/metrics") as r:
                    metrics = await r.text()
                async with http.get(f"{base}/v1/models") as r:
                    assert (await r.json())["data"][0]["id"] == "sim"
            return list(zip(work, results, strict=True)), metrics
        finally:
            await runner.cleanup()

    pairs, metrics_text = asyncio.run(main())
    assert len(pairs) == 64
    prompt_total = cached_total = 0
    for (_, turns), results in pairs:
        assert [r["chunks"] for r in results] == [MAX_TOKENS] * len(turns)
        assert [r["usage"]["completion_tokens"] for r in results] == [MAX_TOKENS] * len(turns)
        cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in results]
        assert cached == expected_cached(turns)
        prompt_total += sum(r["usage"]["prompt_tokens"] for r in results)
        cached_total += sum(cached)
    assert cached_total > 0

    families = {f.name: f for f in text_string_to_metric_families(metrics_text)}
    for name in ("sglang:prompt_tokens", "sglang:generation_tokens", "sglang:cached_tokens",
                 "sglang:cache_hit_rate", "sglang:token_usage", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs", "sglang:hicache_host_used_tokens",
                 "sglang:hicache_host_total_tokens", "sglang:max_total_num_tokens"):
        assert name in families, name

    def value(name: str, **labels: str) -> float:
        return sum(s.value for s in families[name].samples
                   if s.name in (name, f"{name}_total")
                   and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("sglang:prompt_tokens") == prompt_total
    assert value("sglang:cached_tokens", cache_source="device") == cached_total
    assert value("sglang:cached_tokens", cache_source="host") == 0
    assert value("sglang:num_running_reqs") == 0
    ttft = families["sglang:time_to_first_token_seconds"]
    count = [s.value for s in ttft.samples if s.name.endswith("_count")]
    assert count == [64 * 3]


def test_non_streaming_chat_reports_usage_and_bad_input_is_a_400():
    config = ServerConfig(served_model_name="sim", gpu_tokens=1_000_000, page_tokens=PAGE,
                          time_scale=1000.0)

    async def main() -> None:
        runner, base = await start(config)
        try:
            async with aiohttp.ClientSession() as http:
                messages = [{"role": "system", "content": " hello" * 1000},
                            {"role": "user", "content": "world"}]
                bodies = []
                for _ in range(2):
                    async with http.post(f"{base}/v1/chat/completions", json={
                            "model": "sim", "messages": messages, "max_tokens": 5}) as r:
                        assert r.status == 200
                        bodies.append(await r.json())
                first, second = bodies
                assert first["choices"][0]["message"]["content"]
                assert first["usage"]["completion_tokens"] == 5
                assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
                # every full page of 64 word tokens hits the second time
                n = first["usage"]["prompt_tokens"]
                assert n > 1000
                assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n // PAGE * PAGE
                assert second["sim_timing"]["ttft_s"] < first["sim_timing"]["ttft_s"]
                async with http.post(f"{base}/v1/chat/completions",
                                     json={"model": "sim", "messages": []}) as r:
                    assert r.status == 400
                    assert "messages" in (await r.json())["error"]["message"]
                too_long = {"model": "sim", "prompt": " w" * 1_000_000, "max_tokens": 1,
                            "stream": True}
                async with http.post(f"{base}/v1/completions", json=too_long) as r:
                    assert r.status == 400
                    assert "GPU tier" in (await r.json())["error"]["message"]
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_prompt_over_the_context_is_a_400_in_vllms_words():
    config = ServerConfig(served_model_name="sim", gpu_tokens=1_000_000, page_tokens=PAGE,
                          time_scale=1000.0, context_tokens=2048)

    async def main() -> None:
        runner, base = await start(config)
        try:
            async with aiohttp.ClientSession() as http:
                body = {"model": "sim", "prompt": " w" * 2000, "max_tokens": 100}
                async with http.post(f"{base}/v1/completions", json=body) as r:
                    assert r.status == 400
                    err = (await r.json())["error"]
                assert err["type"] == "invalid_request_error"
                assert err["message"] == (
                    "rejected: context: This model's maximum context length is 2048 tokens. "
                    "However, you requested 100 output tokens and your prompt contains 2000 "
                    "input tokens, for a total of 2100 tokens.")
                body["max_tokens"] = 48  # 2,048 in all: fits
                async with http.post(f"{base}/v1/completions", json=body) as r:
                    assert r.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_prompt_tokens_and_page_keys():
    from kvbench.sim.tokens import text_prompt, token_prompt

    words = text_prompt(" the cat, sat.", 2)
    assert words.num_tokens == 5 and len(words.keys) == 2  # ' the',' cat',',',' sat','.'
    longer = text_prompt(" the cat, sat. Then", 2)
    assert longer.num_tokens == 6 and longer.keys[:2] == words.keys and len(longer.keys) == 3
    chars = text_prompt("abcdefgh", 2, chars_per_token=2)
    assert chars.num_tokens == 4 and len(chars.keys) == 2
    ids = token_prompt(list(range(10)), 4)
    assert ids.num_tokens == 10 and len(ids.keys) == 2
    assert token_prompt(list(range(8)), 4).keys == ids.keys
