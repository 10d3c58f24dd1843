"""Cache reuse as InferenceX computes and draws it, on seven engine cases: the golden data
(tests/data/inferencex_cache/upstream.json) is what InferenceX 843c6254f's aggregator
(`compute_server_metrics`) and InferenceX-app's `cacheShareOf` (cache-reuse.ts, run under node)
produced from kvbench's server_metrics_export.json of each case
(benchmarks/inferencex_export/record_cache.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.metrics.aiperf import server_metrics_export
from kvbench.metrics.inferencex import RATES, cache_share, inferencex_reading, server_metrics
from kvbench.metrics.summary import summarize_snapshots
from kvbench.results.reuse import cache_reuse, inferencex_line, shares_differ

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex_cache"
GOLDEN = json.loads((DATA / "upstream.json").read_text())["cases"]
CASES = sorted(GOLDEN)


def _case(name: str) -> dict:
    return json.loads((DATA / "cases" / f"{name}.json").read_text())


def test_all_engine_cases_are_recorded():
    assert CASES == ["atom", "dynamo-vllm", "sglang", "sglang-l3", "trt", "vllm-by-source",
                     "vllm-no-by-source"]


@pytest.mark.parametrize("name", CASES)
def test_rates_and_shares_equal_inferencexs(name):
    case, golden = _case(name), GOLDEN[name]
    metrics = server_metrics_export(case["snapshots"])["metrics"]
    block = server_metrics(metrics, case["framework"])
    if "error" in golden["aggregator"]:  # TRT-LLM: the aggregator has no backend
        assert block is None
        rates = golden["app_trt_parser"]
    else:
        assert block["adapter"] == golden["aggregator"]["adapter"]
        rates = golden["aggregator"]["cache"]
        for k in RATES:
            assert block["cache"][k] == pytest.approx(rates[k], rel=1e-12), k
    reading = inferencex_reading(case["snapshots"], case["framework"])
    assert reading["cache"] == pytest.approx(rates, rel=1e-12)
    share = cache_share(reading["cache"], case["framework"], case["kv_offloading"])
    theirs = golden["cacheShareOf"]
    assert share == pytest.approx({"hbm": theirs["hbm"], "host": theirs["host"],
                                   "unreused": theirs["unreused"],
                                   "combined": theirs["combined"],
                                   "host_source": theirs["hostSource"],
                                   "theoretical": theirs["theoretical"],
                                   "reported_total": theirs["reportedTotal"]}, rel=1e-12)


def test_where_inferencex_differs_from_kvbench_both_are_labelled():
    """SGLang L3 hits: InferenceX counts them unreused, kvbench as served beyond the GPU;
    TRT with offload: one combined segment."""
    for name, ours_text, theirs_text in (
            ("sglang-l3", "GPU 30% · host 45% · recomputed 25%",
             "HBM 30% · host 20% · unreused 50%"),
            ("trt", None, "HBM+host 70% (combined) · unreused 30%")):
        case = _case(name)
        engine = {"trt": "trtllm"}.get(case["framework"], case["framework"])
        server = summarize_snapshots(case["snapshots"], engine)
        ours = cache_reuse(server, None)
        reading = server["inferencex"]
        share = cache_share(reading["cache"], case["framework"], case["kv_offloading"])
        assert inferencex_line(share) == theirs_text
        if ours_text:
            from kvbench.results.reuse import reuse_line

            assert reuse_line(ours) == ours_text
            assert shares_differ(ours, share)


def test_vllm_without_per_source_counters_divides_hits_by_lookups():
    """InferenceX's HBM share is prefix-cache hits over queries, which the scheduler counts
    per scheduling attempt (62 per prompt token on this H200 run): 60x below kvbench's share
    of the prompt tokens. Both round to 0% here, so compare shows kvbench's line alone."""
    case = _case("vllm-no-by-source")
    server = summarize_snapshots(case["snapshots"], "vllm")
    share = cache_share(server["inferencex"]["cache"], "vllm", "dram")
    counters = server["counters"]
    assert share["hbm"] == pytest.approx(counters["cached_tokens_device"]
                                         / counters["prefix_cache_lookups"])
    ours = cache_reuse(server, None)
    assert ours["gpu"] == pytest.approx(counters["cached_tokens_device"]
                                        / counters["prompt_tokens"])
    assert ours["gpu"] > 50 * share["hbm"]
    assert not shares_differ(ours, share)


def test_atom_has_a_kvbench_metric_adapter():
    """ATOM rows read tiers: device from atom:prefix_cache_cached_tokens, external from
    LMCache's loaded tokens, each over the prompt tokens."""
    server = summarize_snapshots(_case("atom")["snapshots"], "atom")
    assert server["cache"]["gpu_cache_hit_rate"] == pytest.approx(0.6)
    assert server["cache"]["external_cache_hit_rate"] == pytest.approx(0.15)
    assert server["engine_reported"]["offload_enabled"] is True
