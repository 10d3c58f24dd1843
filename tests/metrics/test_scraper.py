"""The Scraper against a real HTTP /metrics endpoint, including one that fails."""

from __future__ import annotations

import asyncio
import socket

from fixtures.scrapes import golden_text, metrics_server

from kvbench.files import read_jsonl
from kvbench.metrics import Scraper, summarize_scrape


async def _wait_for(pred, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_scrapes_pre_during_post_and_summarizes(tmp_path):
    out = tmp_path / "scrape.jsonl"
    with metrics_server() as server:
        async def run():
            server.body = golden_text("sglang", "pre")
            scraper = Scraper(server.url, "sglang", out, interval_s=0.05)
            await scraper.start()
            server.body = golden_text("sglang", "during")
            await _wait_for(lambda: scraper.num_ok >= 3)
            server.body = golden_text("sglang", "post")
            await scraper.stop()
            return scraper

        scraper = asyncio.run(run())
    snaps = read_jsonl(out)
    assert snaps[0]["phase"] == "pre" and snaps[-1]["phase"] == "post"
    assert {s["phase"] for s in snaps[1:-1]} == {"during"}
    assert all(s["ok"] for s in snaps) and scraper.num_failed == 0
    # during snapshots keep only what the adapter reads; pre/post keep everything else too
    assert "sglang:cache_hit_rate" in snaps[0]["samples"]
    assert "sglang:cache_hit_rate" not in snaps[1]["samples"]
    assert not any(k.endswith("_bucket") for k in snaps[0]["samples"])
    s = summarize_scrape(out, "sglang")
    assert s["tokens"]["prompt_total"] == 100_000
    assert s["cache"]["cached_tokens_by_tier"]["host"] == 25_000


def test_unreachable_and_erroring_endpoints_never_raise(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now

    async def run(url, out):
        scraper = Scraper(url, "vllm", out, interval_s=0.05)
        await scraper.start()
        await asyncio.sleep(0.12)
        await scraper.stop()

    dead = tmp_path / "dead.jsonl"
    asyncio.run(run(f"http://127.0.0.1:{port}/metrics", dead))
    s = summarize_scrape(dead, "vllm")
    assert s["present"] is False
    assert any("failed" in w for w in s["warnings"])

    with metrics_server() as server:
        server.status, server.body = 500, "boom"
        broken = tmp_path / "500.jsonl"
        asyncio.run(run(server.url, broken))
        server.status, server.body = 200, "this is { not prometheus"
        garbage = tmp_path / "garbage.jsonl"
        asyncio.run(run(server.url, garbage))
    assert all(not r["ok"] and "HTTP 500" in r["error"] for r in read_jsonl(broken))
    assert all(not r["ok"] for r in read_jsonl(garbage))
    assert summarize_scrape(garbage, "vllm")["present"] is False
