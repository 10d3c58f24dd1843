"""The cache-reuse view (results/reuse.py): GPU / host / recomputed shares of the prompt
tokens from the engine's tier counters, checked against the per-request usage."""

from __future__ import annotations

import pytest

from kvbench.results.reuse import cache_reuse, reuse_line


def _server(device, host, external=None, prompt=1000):
    return {"tokens": {"prompt_total": prompt},
            "cache": {"cached_tokens_by_tier": {"device": device, "host": host,
                                                "external": external}}}


def test_engine_tiers_give_the_three_shares():
    v = cache_reuse(_server(600, 250), {"cache": {"prompt_tokens": 990, "cached_tokens": 840}})
    assert v["source"] == "engine tier counters"
    assert (v["gpu"], v["host"], v["external"]) == (0.6, 0.25, 0.0)
    assert v["recomputed"] == pytest.approx(0.15)
    assert v["per_request_hit_rate"] == pytest.approx(840 / 990) and v["agrees"] is True
    assert reuse_line(v) == "GPU 60% · host 25% · recomputed 15%"


def test_a_disagreeing_request_side_is_named():
    v = cache_reuse(_server(600, 250), {"cache": {"prompt_tokens": 1000, "cached_tokens": 500}})
    assert v["agrees"] is False


def test_without_tier_counters_the_request_side_gives_the_cached_share():
    v = cache_reuse({"tokens": {}, "cache": {}},
                    {"cache": {"prompt_tokens": 2000, "cached_tokens": 1500}})
    assert v["source"].startswith("per-request usage") and v["gpu"] is None
    assert v["unknown_tier"] == 0.75 and v["recomputed"] == 0.25
    assert reuse_line(v) == "cached 75% (tier unknown) · recomputed 25%"


def test_nothing_counted_is_none():
    assert cache_reuse(None, None) is None
    assert reuse_line(None) == "unknown"


def test_nothing_cached_needs_no_tier_counters():
    """SGLang 0.5.17's resident arm on the H200 (runs/resident-c6-a): no request hit, so no
    `cached_tokens_total{cache_source}` child was ever created; the usage's 0 of 461,076
    prompt tokens says every tier served 0, not 'tier unknown'."""
    v = cache_reuse({"tokens": {"prompt_total": 461_076}, "cache": {}},
                    {"cache": {"prompt_tokens": 461_076, "cached_tokens": 0}})
    assert (v["gpu"], v["host"], v["external"], v["recomputed"]) == (0.0, 0.0, 0.0, 1.0)
    assert v["unknown_tier"] == 0.0 and v["per_request_hit_rate"] == 0.0
    assert reuse_line(v) == "GPU 0% · host 0% · recomputed 100%"
