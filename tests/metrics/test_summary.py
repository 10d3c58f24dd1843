"""Golden /metrics text per engine -> the internal set, with hand-computed expectations."""

from __future__ import annotations

import pytest
from fixtures.scrapes import golden_snapshots

from kvbench.errors import MetricsError
from kvbench.metrics import summarize_scrape, summarize_snapshots
from kvbench.metrics.series import counter_delta


def test_sglang_hicache_tp2_collapses_rank_copies_and_counts_late_host_series():
    s = summarize_snapshots(golden_snapshots("sglang"), "sglang")
    assert s["present"] and s["warnings"] == []
    assert s["tokens"] == {"prompt_total": 100_000, "generation_total": 10_000}
    # cache_source="total" is not a tier; "host" appears only after first use (from 0).
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 40_000, "host": 25_000,
                                                   "external": 0}
    assert s["cache"]["gpu_cache_hit_rate"] == pytest.approx(0.40)
    assert s["cache"]["cpu_cache_hit_rate"] == pytest.approx(0.25)
    assert s["cache"]["external_cache_hit_rate"] == 0
    assert s["cache"]["overall_cache_hit_rate"] == pytest.approx(0.65)
    kv = s["kv_cache"]
    assert kv["gpu_total_tokens"] == 524_288  # one copy per TP rank, not the sum
    assert kv["gpu_usage_pct_max"] == pytest.approx(90)
    assert kv["gpu_usage_pct_mean"] == pytest.approx(75)  # during + post, not pre
    assert kv["cpu_used_tokens_max"] == 400_000
    assert kv["cpu_total_tokens"] == 2_097_152
    assert kv["cpu_usage_pct_max"] == pytest.approx(100 * 400_000 / 2_097_152)
    # older SGLang exports tokens, not bytes: bytes stay absent, tokens fall back
    assert s["kv_offload"] == {"bytes_gpu_to_cpu": None, "bytes_cpu_to_gpu": None,
                               "tokens_gpu_to_cpu": 150_000, "tokens_cpu_to_gpu": 20_000}
    assert s["sources"]["offload_tokens_gpu_to_cpu"] == "sglang:evicted_tokens_total"
    assert s["scheduler"]["queue_depth_max"] == 4
    assert s["scheduler"]["running_requests_max"] == 16
    assert s["engine_reported"] == {"page_size_tokens": 64, "offload_enabled": True,
                                    "spec_decoding": False}
    assert s["tiers"]["host"] == {"cached_tokens": 25_000, "hit_rate": pytest.approx(0.25),
                                  "capacity_tokens": 2_097_152,
                                  "usage_pct_max": pytest.approx(100 * 400_000 / 2_097_152)}
    assert s["timeline"]["gpu_kv_usage"] == [0.01, 0.6, 0.9]
    assert s["timeline"]["t_s"] == [0, 30, 60]
    assert s["window_s"] == 60


def test_vllm_sums_dp_engines_and_reads_connector_tier():
    s = summarize_snapshots(golden_snapshots("vllm"), "vllm")
    assert s["tokens"] == {"prompt_total": 160_000, "generation_total": 16_000}
    tiers = s["cache"]["cached_tokens_by_tier"]
    assert tiers == {"device": 80_000, "host": None, "external": 24_000}
    assert s["cache"]["gpu_cache_hit_rate"] == pytest.approx(0.5)
    assert s["cache"]["cpu_cache_hit_rate"] is None  # vLLM has no host-tier counter
    assert s["cache"]["external_cache_hit_rate"] == pytest.approx(0.15)
    assert s["cache"]["overall_cache_hit_rate"] == pytest.approx(0.65)
    assert s["sources"]["cached_tokens_device"] == "vllm:prompt_tokens_by_source_total"
    assert s["kv_offload"]["bytes_gpu_to_cpu"] == 12e9
    assert s["kv_offload"]["bytes_cpu_to_gpu"] == 3e9
    assert s["kv_cache"]["gpu_total_tokens"] == 2 * 20_480 * 16
    assert s["kv_cache"]["gpu_usage_pct_max"] == pytest.approx(95)
    assert s["kv_cache"]["cpu_usage_pct_max"] == pytest.approx(45)
    assert s["scheduler"]["queue_depth_max"] == 3
    assert s["scheduler"]["running_requests_max"] == 24
    assert s["engine_reported"] == {"page_size_tokens": 16, "offload_enabled": True,
                                    "spec_decoding": False}


def test_vllm_legacy_names_fall_back_and_missing_label_child_is_zero():
    s = summarize_snapshots(golden_snapshots("vllm_legacy"), "vllm")
    assert s["tokens"]["prompt_total"] == 30_000
    assert s["cache"]["cached_tokens_by_tier"]["device"] == 9_000
    assert s["sources"]["cached_tokens_device"] == "vllm:prefix_cache_hits_total"
    assert s["sources"]["gpu_kv_usage"] == "vllm:gpu_cache_usage_perc"
    # transfer_type="CPU_to_GPU" child never appeared: 0, not absent
    assert s["kv_offload"]["bytes_gpu_to_cpu"] == 1e9
    assert s["kv_offload"]["bytes_cpu_to_gpu"] == 0
    assert s["kv_cache"]["gpu_total_tokens"] == 8192 * 32
    assert s["engine_reported"]["page_size_tokens"] == 32
    assert s["engine_reported"]["spec_decoding"] is True


def test_counter_reset_counts_the_value_after_the_restart():
    s = summarize_snapshots(golden_snapshots("vllm_restart"), "vllm")
    # per engine: 2,000 -> 42,000 (+40,000), restart, then 10,000 (+10,000)
    assert s["tokens"]["prompt_total"] == 2 * 50_000
    assert s["counter_resets"] > 0
    assert any("reset" in w for w in s["warnings"])


def test_counter_delta_rules():
    a, b = (("x", "1"),), (("x", "2"),)
    assert counter_delta([{a: 5}, {a: 9}, {a: 12}]) == (7, 0)
    assert counter_delta([{a: 5}, {a: 9, b: 4}]) == (8, 0)  # b appears: counted from 0
    assert counter_delta([{a: 5}, {a: 9}, {a: 2}]) == (6, 1)  # reset: 4 then 2
    assert counter_delta([None, {a: 3}]) == (3, 0)  # family created during the run
    assert counter_delta([{a: 5}, {}, {a: 2}]) == (2, 0)  # vanished then back: from 0


def test_trtllm_tiers_capacity_and_offload():
    s = summarize_snapshots(golden_snapshots("trtllm"), "trtllm")
    assert s["tokens"]["prompt_total"] == 40_000
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 12_000, "host": 6_000,
                                                   "external": 0}
    assert s["cache"]["cpu_cache_hit_rate"] == pytest.approx(0.15)
    assert s["kv_cache"]["gpu_total_tokens"] == 12_000 * 32
    assert s["kv_cache"]["cpu_usage_pct_max"] == pytest.approx(50)
    assert s["kv_offload"]["bytes_gpu_to_cpu"] == 2e9
    assert s["kv_offload"]["bytes_cpu_to_gpu"] == 6e8
    assert s["engine_reported"] == {"page_size_tokens": 32, "offload_enabled": True,
                                    "spec_decoding": True}


def test_embedded_engine_uses_sglang_names():
    # golden text rendered by prometheus_client exactly as `kvbench serve-sim` exports it
    s = summarize_snapshots(golden_snapshots("sim"), "sim")
    assert s["adapter"] == "sim"
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 18_000, "host": 15_000,
                                                   "external": 0}
    assert s["kv_offload"] == {"bytes_gpu_to_cpu": None, "bytes_cpu_to_gpu": None,
                               "tokens_gpu_to_cpu": 160_000, "tokens_cpu_to_gpu": 15_000}
    assert s["sources"]["offload_tokens_gpu_to_cpu"] == "sglang:hicache_backup_tokens_total"
    assert s["engine_reported"]["offload_enabled"] is True
    assert s["kv_cache"]["cpu_usage_pct_max"] == pytest.approx(100 * 250_000 / 262_144)
    assert s["timeline"]["host_pool_usage"][1] == pytest.approx(120_000 / 262_144)


def test_resident_sglang_reports_offload_off():
    snaps = golden_snapshots("sglang")
    for s in snaps:
        for name in ("sglang:hicache_host_used_tokens", "sglang:hicache_host_total_tokens"):
            s["samples"].pop(name)
    out = summarize_snapshots(snaps, "sglang")
    assert out["engine_reported"]["offload_enabled"] is False
    assert out["kv_cache"]["cpu_total_tokens"] is None


def test_failed_scrapes_are_warnings_and_missing_file_is_absent(tmp_path):
    snaps = golden_snapshots("sglang")
    snaps[0] = {"phase": "pre", "t_ns": snaps[0]["t_ns"], "ok": False,
                "error": "ClientConnectorError: refused", "samples": {}}
    s = summarize_snapshots(snaps, "sglang")
    assert s["present"] and s["failed_snapshots"] == 1
    assert any("failed 1 of 3" in w for w in s["warnings"])
    assert any("no pre-run scrape" in w for w in s["warnings"])
    assert s["tokens"]["prompt_total"] == 50_000  # from the first good scrape
    absent = summarize_scrape(tmp_path / "scrape.jsonl", "vllm")
    assert absent["present"] is False and "no scrape file" in absent["warnings"][0]
    all_failed = summarize_snapshots([dict(snaps[0])], "sglang")
    assert all_failed["present"] is False


def test_unknown_engine_lists_known_ones():
    with pytest.raises(MetricsError) as e:
        summarize_snapshots([], "tgi")
    assert "sglang" in str(e.value) and "vllm" in str(e.value)


def test_recipe_framework_names_resolve_to_adapters():
    from kvbench.metrics import load_adapter

    assert load_adapter("trt").engine == "trtllm"
    assert load_adapter("dynamo-vllm").engine == "vllm"
    assert load_adapter("sglang-disagg").engine == "sglang"


def test_real_vllm_026_offload_scrape_reads_tiers_and_marks_lookups_as_attempts():
    """Real vLLM 0.26 /metrics text from the H200 run (benchmarks/results/h200/vllm/): pre is
    an idle server of the same build, post the native-offload conc-4 server near the end of its
    replay. Expected values read off the text by hand."""
    s = summarize_snapshots(golden_snapshots("vllm026_offload"), "vllm")
    assert s["tokens"] == {"prompt_total": 718_454, "generation_total": 6_995}
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 1_456, "host": None,
                                                   "external": 503_056}
    assert s["cache"]["external_cache_hit_rate"] == pytest.approx(503_056 / 718_454)
    assert s["kv_offload"]["bytes_gpu_to_cpu"] == 31_508_398_080
    assert s["kv_offload"]["bytes_cpu_to_gpu"] == 77_047_529_472
    assert s["kv_cache"]["gpu_total_tokens"] == 2_730 * 16
    # the scheduler's lookups: 41.8 M for 0.72 M prompt tokens, an attempt count
    assert s["scheduler"]["prefix_cache_lookups"] == 41_791_886
    assert s["scheduler"]["prefix_cache_lookups_per_prompt_token"] == pytest.approx(58.17, abs=0.01)
    assert s["sources"]["cached_tokens_device"] == "vllm:prompt_tokens_by_source_total"
    assert s["engine_reported"]["offload_enabled"] is True


@pytest.mark.parametrize(("case", "enabled"), [("vllm026_simple_nohit", True),
                                               ("vllm026_resident", False)])
def test_vllm_connector_shows_offload_on_even_when_it_never_hits(case, enabled):
    """vLLM 0.26's simple CPU connector exports no kv_offload_* counters; at conc 12 its tier
    never hit. Its external-cache lookups (every prompt token) still show the connector is
    attached, so the offload arm is not mislabelled "offload off"; the resident server's are 0."""
    s = summarize_snapshots(golden_snapshots(case), "vllm")
    assert s["engine_reported"]["offload_enabled"] is enabled
    lookups = s["counters"]["connector_lookups"]
    assert (lookups == 845_026) if enabled else (lookups == 0)
    if enabled:
        assert s["cache"]["cached_tokens_by_tier"]["external"] == 0


def test_real_sglang_0517_write_through_scrape_reads_both_tiers():
    """The H200 HiCache write_through conc-6 run (benchmarks/results/h200/sglang/runs/
    hicache-c6-a): its last /metrics text has both cached_tokens_total children, device (created
    at the first GPU-tier hit) and host; values read off the text by hand, and equal to what the
    run's replay summed from the per-request usage over the same requests to within the
    warm-up and the cut-off request (result.json cache_reuse: agrees)."""
    s = summarize_snapshots(golden_snapshots("sglang0517_write_through"), "sglang")
    assert s["tokens"] == {"prompt_total": 480_810, "generation_total": 4_675}
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 18_944, "host": 274_112,
                                                   "external": 0}
    assert s["cache"]["gpu_cache_hit_rate"] == pytest.approx(18_944 / 480_810)
    assert s["cache"]["cpu_cache_hit_rate"] == pytest.approx(274_112 / 480_810)
    assert s["kv_offload"]["tokens_cpu_to_gpu"] == 310_720  # load_back_tokens_total
    assert (s["kv_cache"]["cpu_used_tokens_max"], s["kv_cache"]["cpu_total_tokens"]) == (
        161_792, 162_816)


def test_real_sglang_0517_hicache_scrape_reads_the_host_tier():
    """Real SGLang 0.5.17 /metrics text from the H200 (benchmarks/results/h200/sglang/): pre is
    an idle resident server of the same build, post the HiCache write_through_selective conc-6
    server near the end of its replay. Expected values read off the text by hand."""
    s = summarize_snapshots(golden_snapshots("sglang0517_hicache"), "sglang")
    # prompt_tokens_total{is_streaming="true"}: the replay's; the 18 of SGLang's own warm-up
    # /generate request are the is_streaming="false" child
    assert s["tokens"] == {"prompt_total": 285_762, "generation_total": 2_886}
    # cached_tokens_total has only a cache_source="host" child: no device hit was ever counted
    assert s["cache"]["cached_tokens_by_tier"] == {"device": 0, "host": 133_184, "external": 0}
    assert s["cache"]["cpu_cache_hit_rate"] == pytest.approx(133_184 / 285_762)
    assert s["kv_offload"]["tokens_cpu_to_gpu"] == 148_800  # load_back_tokens_total
    assert s["kv_cache"]["gpu_total_tokens"] == 43_648  # --max-total-tokens 43680 in pages of 64
    assert (s["kv_cache"]["cpu_used_tokens_max"], s["kv_cache"]["cpu_total_tokens"]) == (
        152_064, 162_816)  # the host pool kvbench planned: 162,816 tokens
    assert s["engine_reported"] == {"page_size_tokens": 64, "offload_enabled": True,
                                    "spec_decoding": False}
