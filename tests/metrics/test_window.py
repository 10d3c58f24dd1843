"""Server counters over the profiling phase (metrics/window.py): after a warm-up, from the
last scrape before the phase began, as AIPerf counts them (agentx-harness 1.0.12
aiperf/server_metrics/accumulator.py:78-80); without one, the whole run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.files import iter_jsonl
from kvbench.metrics import profiling_start_unix_ns, summarize_scrape, summarize_snapshots
from kvbench.metrics.aiperf import server_metrics_export
from kvbench.metrics.exposition import parse_exposition

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h200" / "vllm"
S = 1_000_000_000


def _snap(phase: str, t_s: float, prompt: float, hit: float, usage: float) -> dict:
    text = (f'vllm:prompt_tokens_total{{engine="0"}} {prompt}\n'
            f'vllm:prompt_tokens_by_source_total{{engine="0",source="local_cache_hit"}} {hit}\n'
            f'vllm:prompt_tokens_by_source_total{{engine="0",source="local_compute"}} '
            f'{prompt - hit}\n'
            f'vllm:kv_cache_usage_perc{{engine="0"}} {usage}\n')
    return {"phase": phase, "t_ns": int(t_s * S), "ok": True, "error": None,
            "samples": parse_exposition(text)}


# a warm-up from 0 to 10.5 s (all misses: 4,000 prompt tokens), then a profiled phase
# (6,000 prompt tokens, 4,500 of them cached); the KV pool full during the warm-up only
SNAPS = [_snap("pre", 0, 0, 0, 0.0), _snap("during", 5, 2_000, 0, 0.9),
         _snap("during", 10, 4_000, 0, 0.9), _snap("during", 15, 7_000, 2_000, 0.3),
         _snap("during", 20, 10_000, 4_500, 0.5)]
WARMED = {"requests": {"warmup": 8},
          "run": {"started_unix_s": 0.2, "prepare_s": 0.0, "warmup_s": 10.3}}


def test_a_warm_up_is_left_out_from_the_last_scrape_before_the_phase():
    start = profiling_start_unix_ns(WARMED)
    assert start == int(10.5 * S)
    s = summarize_snapshots(SNAPS, "vllm", start)
    assert s["counted_from"] == "profiling start"
    assert s["baseline_lead_s"] == pytest.approx(0.5)  # the 10 s scrape is the baseline
    assert s["warmup_snapshots_left_out"] == 2
    assert s["tokens"]["prompt_total"] == 6_000
    assert s["cache"]["gpu_cache_hit_rate"] == pytest.approx(4_500 / 6_000)
    # gauges while profiled requests ran: not the warm-up's full pool in the baseline
    assert s["kv_cache"]["gpu_usage_pct_max"] == pytest.approx(50)
    # InferenceX's reading and the AIPerf export count the same window
    assert s["inferencex"]["cache"]["gpu_cache_hit_rate"] == pytest.approx(0.75)
    export = server_metrics_export(SNAPS, None, start)["metrics"]
    total = {tuple(sorted((x["labels"] or {}).items())): x["stats"]["total"]
             for x in export["vllm:prompt_tokens_by_source"]["series"]}
    assert total[(("engine", "0"), ("source", "local_cache_hit"))] == 4_500
    assert export["vllm:kv_cache_usage_perc"]["series"][0]["stats"]["max"] == 0.5


def test_the_snapshot_at_the_warm_ups_end_is_the_baseline():
    """The replay scrapes as its warm-up ends (Scraper.mark_profiling_start): that snapshot
    is the baseline, though the start derived from the summary's clocks falls a moment
    before it; it keeps every family, so the export counts even those the during snapshots
    drop, where a during baseline leaves them out rather than count them from zero."""
    extra = parse_exposition('vllm:request_success_total{engine="0"} 3\n')
    marked = {"phase": "profiling_start", "t_ns": int(10.6 * S), "ok": True, "error": None,
              "samples": {**_snap("during", 10.6, 4_100, 50, 0.9)["samples"], **extra}}
    post = {**SNAPS[-1], "phase": "post", "samples": {
        **SNAPS[-1]["samples"], **parse_exposition('vllm:request_success_total{engine="0"} 9\n')}}
    # a periodic scrape sent at 10.55 s, answered after the marked one: written after it
    late = _snap("during", 10.55, 4_050, 0, 0.9)
    snaps = [*SNAPS[:3], marked, late, SNAPS[3], post]
    s = summarize_snapshots(snaps, "vllm", int(10.5 * S))
    assert s["tokens"]["prompt_total"] == 10_000 - 4_100  # the late one is no reset
    assert s["counter_resets"] == 0
    assert s["warmup_snapshots_left_out"] == 4
    export = server_metrics_export(snaps, None, int(10.5 * S))["metrics"]
    assert export["vllm:request_success"]["series"][0]["stats"]["total"] == 6
    # without the marked snapshot the baseline is the 10 s during one: the family it lacks
    # is not in the export at all
    export = server_metrics_export([*SNAPS[:4], post], None, int(10.5 * S))["metrics"]
    assert "vllm:request_success" not in export
    assert "vllm:prompt_tokens_by_source" in export


def test_without_a_warm_up_the_whole_run_counts():
    for summary in ({"requests": {"warmup": 0}, "run": {**WARMED["run"]}},
                    {"requests": {"warmup": 8}, "run": {"started_unix_s": 0.2,
                                                        "warmup_s": 0.0}},
                    {}, None):
        assert profiling_start_unix_ns(summary) is None
    s = summarize_snapshots(SNAPS, "vllm", None)
    assert s["counted_from"] == "run start" and s["warmup_snapshots_left_out"] == 0
    assert s["tokens"]["prompt_total"] == 10_000
    assert s["cache"]["gpu_cache_hit_rate"] == pytest.approx(0.45)
    assert s["kv_cache"]["gpu_usage_pct_max"] == pytest.approx(90)


@pytest.mark.parametrize("run", ["qwen3-8b_tp1_conc4_kvdram-vllm-simple__r1",
                                 "qwen3-8b_tp1_conc4_kvdram-vllm-native"])
def test_real_vllm_agentx_run_counts_what_its_profiled_requests_were_served(run):
    """Real vLLM 0.26 runs under the AgentX profile (session 14: 17-35 s of warm-up before a
    50 s phase): counted from the run's start, the engine's tiers say 67-75% of the prompt was
    cached, the warm-up's whole-history t* prefills in it; over the profiling phase they agree
    with the profiled requests' own cached tokens to a point (the same requests)."""
    job = RUNS / "runs-agentx-v1" / run
    summary = json.loads((job / "summary.json").read_text())
    whole = summarize_scrape(job / "scrape.jsonl.gz", "vllm")
    phase = summarize_scrape(job / "scrape.jsonl.gz", "vllm", profiling_start_unix_ns(summary))
    ok = [r for r in iter_jsonl(job / "records.jsonl.gz")
          if r["status"] == "ok" and not r["is_warmup"]]
    served = sum(r["cached_tokens"] for r in ok) / sum(r["prompt_tokens"] for r in ok)
    assert abs(phase["cache"]["overall_cache_hit_rate"] - served) < 0.05
    assert whole["cache"]["overall_cache_hit_rate"] < served - 0.1
    assert phase["counted_from"] == "profiling start"
    assert 0 <= phase["baseline_lead_s"] < 1.5  # one scrape interval, and the clocks' offset
