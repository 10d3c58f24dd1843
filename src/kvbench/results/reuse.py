"""Cache reuse as InferenceX publishes it: per run (one concurrency point), the share of the
prompt tokens the engine served from GPU memory, from host memory (or an external store), and
recomputed.

The tier split is the engine's own accounting of each request's prefix hit, summed over the
profiled window by its counters (SGLang `sglang:cached_tokens_total{cache_source=device|host}`,
vLLM `vllm:prompt_tokens_by_source_total{source=local_cache_hit|external_kv_transfer}`, TRT-LLM
`trtllm_prompt_cache_hit_tokens_total{cache_tier}`; metrics/adapters/*.yaml). The per-request
usage every response carries (`prompt_tokens_details.cached_tokens`, summed by the replay)
is the cross-check: both count the same requests' cached tokens, so they must agree within
REUSE_AGREEMENT; when the engine exposes no tier counters, the request-side total gives the
cached share with its tier unknown."""

from __future__ import annotations

from typing import Any

# The counters cover the scrape window, the replay's usage the profiled requests only (warm-up
# and a cut-off request fall between them): 5 percentage points of the prompt tokens.
REUSE_AGREEMENT = 0.05


def _share(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def cache_reuse(server: dict[str, Any] | None, summary: dict[str, Any] | None
                ) -> dict[str, Any] | None:
    """{gpu, host, external, recomputed, unknown_tier} shares of the prompt tokens with the
    token counts and where they came from; None when neither side counted prompt tokens."""
    server, summary = server or {}, summary or {}
    cache = server.get("cache") or {}
    tiers = cache.get("cached_tokens_by_tier") or {}
    prompt = (server.get("tokens") or {}).get("prompt_total")
    client = summary.get("cache") or {}
    client_prompt, client_cached = client.get("prompt_tokens"), client.get("cached_tokens")
    client_rate = _share(client_cached, client_prompt)
    if prompt and any(tiers.get(t) is not None for t in ("device", "host", "external")):
        gpu, host, ext = (tiers.get(t) or 0 for t in ("device", "host", "external"))
        cached = gpu + host + ext
        out = {
            "source": "engine tier counters", "prompt_tokens": prompt,
            "gpu": gpu / prompt, "host": host / prompt, "external": ext / prompt,
            "recomputed": max(0.0, 1 - cached / prompt), "unknown_tier": 0.0,
            "cached_tokens": {"gpu": gpu, "host": host, "external": ext},
        }
        if client_rate is not None:
            gap = abs(cached / prompt - client_rate)
            out["per_request_hit_rate"] = client_rate
            out["agrees"] = gap <= REUSE_AGREEMENT
        return out
    if client_rate == 0:  # nothing cached: every tier's share is known to be 0
        return {"source": "per-request usage (nothing cached)", "prompt_tokens": client_prompt,
                "gpu": 0.0, "host": 0.0, "external": 0.0, "recomputed": 1.0,
                "unknown_tier": 0.0, "cached_tokens": {"gpu": 0, "host": 0, "external": 0},
                "per_request_hit_rate": 0.0}
    if client_rate is not None:
        return {"source": "per-request usage (no tier counters)",
                "prompt_tokens": client_prompt, "gpu": None, "host": None, "external": None,
                "recomputed": 1 - client_rate, "unknown_tier": client_rate,
                "cached_tokens": {"total": client_cached}, "per_request_hit_rate": client_rate}
    return None


def offload_share(reuse: dict[str, Any] | None) -> float | None:
    """The share of prompt tokens served beyond the GPU: host and external tiers together.
    vLLM 0.26 counts its CPU offload connectors' hits as `external_kv_transfer`
    (`vllm/v1/metrics/stats.py` PromptTokenStats), SGLang HiCache its host pool as
    `cache_source="host"`. None where the tiers are unknown."""
    if not reuse or reuse["host"] is None:
        return None
    return reuse["host"] + reuse["external"]


def reuse_line(reuse: dict[str, Any] | None) -> str:
    """`GPU 61% · host 23% · recomputed 16%` (the cached share alone when tiers are unknown)."""
    if not reuse:
        return "unknown"
    if reuse["gpu"] is None:
        return (f"cached {reuse['unknown_tier']:.0%} (tier unknown) · recomputed "
                f"{reuse['recomputed']:.0%}")
    return (f"GPU {reuse['gpu']:.0%} · host {offload_share(reuse):.0%} · recomputed "
            f"{reuse['recomputed']:.0%}")


def inferencex_line(share: dict[str, Any] | None) -> str:
    """`HBM 0% · host 58% · unreused 42%` as InferenceX's cache-reuse chart draws the point
    (metrics/inferencex.py `cache_share`); one combined segment for TRT-LLM with offload."""
    if share is None:
        return "no tier reported"
    if share["combined"]:
        return f"HBM+host {share['hbm']:.0%} (combined) · unreused {share['unreused']:.0%}"
    return f"HBM {share['hbm']:.0%} · host {share['host']:.0%} · unreused {share['unreused']:.0%}"


def shares_differ(reuse: dict[str, Any] | None, share: dict[str, Any] | None) -> bool:
    """Whether InferenceX's drawing of a point differs from kvbench's per-prompt-token
    shares by a whole percentage point in any segment (then both are shown, labelled)."""
    if share is None:
        return reuse is not None
    if reuse is None or reuse.get("gpu") is None:
        return True
    ours = (reuse["gpu"], (offload_share(reuse) or 0.0), reuse["recomputed"])
    theirs = (share["hbm"], share["host"], share["unreused"])
    return any(abs(a - b) >= 0.01 for a, b in zip(ours, theirs, strict=True))
