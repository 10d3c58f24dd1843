"""The during-snapshot parse: lines of the kept samples only, the same samples as a full parse."""

from __future__ import annotations

import pytest
from fixtures.scrapes import GOLDEN

from kvbench.metrics import load_adapter, parse_exposition

CASES = sorted(p for p in GOLDEN.glob("*/*.prom"))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_kept_samples_equal_a_full_parse(path, engine):
    text = path.read_text()
    keep = load_adapter(engine).metric_names()
    full = parse_exposition(text)
    assert parse_exposition(text, keep) == {k: v for k, v in full.items() if k in keep}


def test_real_vllm_026_text_keeps_counters_and_drops_histograms():
    # the /metrics text of vLLM 0.26 with the native offload connector after an H200 run
    text = (GOLDEN / "vllm026_offload" / "post.prom").read_text()
    got = parse_exposition(text, load_adapter("vllm").metric_names())
    assert got["vllm:prompt_tokens_total"] == [
        [{"engine": "0", "model_name": "Qwen/Qwen3-8B"}, 718454.0]]
    assert got["vllm:external_prefix_cache_queries_total"][0][1] == 747252.0
    assert not any(k.endswith(("_bucket", "_sum", "_count")) for k in got)


def test_a_family_comment_without_samples_is_not_a_sample():
    text = ("# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
            "# TYPE vllm:e2e_request_latency_seconds histogram\n"
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3.0\n')
    assert parse_exposition(text, {"vllm:num_requests_running"}) == {}
