"""A minimal streaming probe of an OpenAI-compatible server: fixed prompt lengths, N requests
in flight at once, TTFT / TPOT / throughput. It checks a server before a real replay and gives
the prefill and decode speed by prompt length (kvbench replay measures real traces).

    python benchmarks/gpu/probe.py --url http://127.0.0.1:8000 --model M --tokenizer DIR \\
        --prompt-tokens 1024 8192 --concurrency 1 4 --requests 4 --max-tokens 64 --out probe.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time


def _words(tokenizer: str) -> list[str]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    out = []
    for tid in range(len(tok)):
        text = tok.decode([tid])
        if text.startswith(" ") and text[1:].isalpha() and tok.encode(
                text, add_special_tokens=False) == [tid]:
            out.append(text)
    return out


async def _one(session, url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {
        "model": model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter_ns()
    chunks: list[int] = []
    usage = None
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            return {"error": f"HTTP {resp.status}: {(await resp.text())[:300]}"}
        async for raw in resp.content:
            now = time.perf_counter_ns()
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            data = json.loads(line[5:])
            if data.get("usage"):
                usage = data["usage"]
            for ch in data.get("choices", []):
                if ch.get("delta", {}).get("content"):
                    chunks.append(now)
    if not chunks:
        return {"error": "no content chunks", "usage": usage}
    n_out = (usage or {}).get("completion_tokens") or len(chunks)
    return {
        "ttft_ms": (chunks[0] - t0) / 1e6,
        "e2e_ms": (chunks[-1] - t0) / 1e6,
        "tpot_ms": (chunks[-1] - chunks[0]) / 1e6 / max(1, n_out - 1),
        "prompt_tokens": (usage or {}).get("prompt_tokens"),
        "completion_tokens": n_out,
        "t_send_ns": t0,
        "t_last_ns": chunks[-1],
    }


async def _point(url, model, words, prompt_tokens, conc, requests, max_tokens, seed) -> dict:
    import aiohttp

    rng = random.Random(seed)
    prompts = ["".join(rng.choices(words, k=prompt_tokens)) for _ in range(requests)]
    sem = asyncio.Semaphore(conc)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def run(p):
            async with sem:
                return await _one(session, url, model, p, max_tokens)
        t0 = time.perf_counter_ns()
        results = await asyncio.gather(*(run(p) for p in prompts))
        wall_s = (time.perf_counter_ns() - t0) / 1e9
    ok = [r for r in results if "error" not in r]

    def med(key):
        return statistics.median(r[key] for r in ok) if ok else None

    return {
        "prompt_tokens": prompt_tokens, "concurrency": conc, "requests": requests,
        "errors": [r["error"] for r in results if "error" in r],
        "ttft_ms_p50": med("ttft_ms"), "tpot_ms_p50": med("tpot_ms"), "e2e_ms_p50": med("e2e_ms"),
        "server_prompt_tokens_p50": med("prompt_tokens") if ok and ok[0]["prompt_tokens"]
        else None,
        "output_tok_s": sum(r["completion_tokens"] for r in ok) / wall_s,
        "wall_s": wall_s,
        "records": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--prompt-tokens", type=int, nargs="+", default=[1024])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    words = _words(args.tokenizer)
    points = []
    for n in args.prompt_tokens:
        for c in args.concurrency:
            p = asyncio.run(_point(args.url, args.model, words, n, c, max(args.requests, c),
                                   args.max_tokens, seed=n * 1000 + c))
            points.append(p)
            print(json.dumps({k: v for k, v in p.items() if k != "records"}), flush=True)
            with open(args.out, "w") as f:
                json.dump(points, f, indent=1)


if __name__ == "__main__":
    main()
