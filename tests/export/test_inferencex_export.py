"""`kvbench export --format inferencex` against InferenceX's own aggregation and validation:
tests/data/inferencex_export/ holds what InferenceX 843c6254f's
`utils.agentic.aggregation.process_agentic_result` and `validate_agentic_result` produced on
kvbench's exports of the 31 committed H200 runs (vLLM 0.26, SGLang 0.5.17), recorded by
benchmarks/inferencex_export/record.py. kvbench's own aggregate must equal upstream's, field
for field, and the sidecar must be what upstream read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvbench.export.point import export_job

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "benchmarks" / "results" / "h200"
GOLDEN = REPO / "tests" / "data" / "inferencex_export"
VERDICTS = json.loads((GOLDEN / "verdicts.json").read_text())["runs"]


def _export(key: str, out: Path) -> tuple[dict, object]:
    engine, name = key.split("/")
    job = RUNS / engine / "runs" / name
    result = json.loads((job / "result.json").read_text())
    return result, export_job(job, result, out)


def test_upstream_accepted_every_committed_run():
    assert len(VERDICTS) == 31
    for key, v in VERDICTS.items():
        assert v["aggregation"]["rc"] == 0 and v["validation"]["rc"] == 0, key
        assert any(line.startswith("Validated aiperf request error rate")
                   for line in v["validation"]["stdout"]), key
        assert v["kvbench_equals_upstream"] is True, key
        # agentx-harness 1.0.12's own models took every line and the server export
        assert v["harness_models"]["errors"] == [] and v["harness_models"]["records"] > 0, key


def test_every_export_equals_what_inferencex_aggregated(tmp_path):
    for key, verdict in VERDICTS.items():
        _, point = _export(key, tmp_path / key)
        assert point.name == verdict["result_filename"], key
        upstream = json.loads((GOLDEN / "upstream" / f"{key.replace('/', '-')}.json")
                              .read_text())
        assert point.agg == upstream, key
        assert json.loads(point.agg_path.read_text()) == upstream
        assert point.accepted


def test_exported_numbers_are_kvbenchs_in_inferencex_units(tmp_path):
    """TTFT and E2E are the same samples in both: kvbench's ms percentiles / 1000 are the
    aggregate's seconds; the cache and pool figures are the engine's counters."""
    result, point = _export("vllm/qwen3-8b_tp1_conc4_kvdram-vllm-native", tmp_path)
    lat = point.agg["request_metrics"]["latency"]
    ours = result["request_metrics"]["latency"]
    for mine, theirs in (("ttft_ms", "ttft"), ("e2e_ms", "e2el")):
        for stat in ("mean", "p50", "p75", "p90", "p95", "std"):
            assert lat[theirs][stat] == pytest.approx(ours[mine][stat] / 1000, abs=1e-5)
    server = point.agg["server_metrics"]
    assert server["tokens"]["prompt_total"] == result["server_metrics"]["tokens"]["prompt_total"]
    assert point.agg["kv_cache_pool_tokens"] == 43_680  # "GPU KV cache size: 43,680 tokens"
    assert server["cache"]["cpu_cache_hit_rate"] == pytest.approx(
        result["server_metrics"]["cache"]["external_cache_hit_rate"], abs=1e-5)
    assert point.agg["kv_offload_backend"] == {"name": "vllm-native"}
    assert point.agg["dp_attention"] == "false" and point.agg["num_requests_successful"] == 43
    assert re.fullmatch(r"[0-9a-f]{64}", point.agg["recipe_fingerprint"])
    assert any("size-gb-per-rank" in n for n in point.notes)


def test_sidecar_is_the_harness_layout(tmp_path):
    _, point = _export("sglang/hicache-c4", tmp_path)
    art = point.raw_dir / "aiperf_artifacts"
    lines = [json.loads(x) for x in (art / "profile_export.jsonl").read_text().splitlines()]
    first = lines[0]
    assert set(first) == {"metadata", "metrics", "error"} and first["error"] is None
    assert first["metadata"]["benchmark_phase"] == "profiling"
    assert first["metrics"]["time_to_first_token"]["unit"] == "ms"
    assert first["metadata"]["request_end_ns"] > first["metadata"]["request_start_ns"] > 1e18
    aggregate = json.loads((art / "profile_export_aiperf.json").read_text())
    assert aggregate["request_count"]["avg"] == len(lines)
    assert aggregate["metadata"]["submission_valid"] is False  # not run under --profile agentx
    theo = aggregate["theoretical_prefix_cache_hit"]
    assert point.agg["request_metrics"]["cache"]["theoretical_cache_hit_rate"] == round(
        theo["sum"] / theo["count"], 5)
    server = json.loads((art / "server_metrics_export.json").read_text())
    cached = server["metrics"]["sglang:cached_tokens"]
    assert cached["type"] == "counter" and cached["series"][0]["labels"]["cache_source"] == "host"
    csv_text = (art / "server_metrics_export.csv").read_text()
    assert "Endpoint,Type,Metric,Unit,total," in csv_text and ",sglang:cached_tokens," in csv_text
    env = json.loads((point.raw_dir / "inferencex_env.json").read_text())
    assert env["KV_OFFLOAD_BACKEND_METADATA"] == '{"name": "hicache"}'
    assert (point.raw_dir / "server.log").is_file()


def test_cli_writes_points_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    from kvbench.cli import main

    main(["export", "--format", "inferencex", str(RUNS / "sglang" / "runs" / "hicache-c4"),
          "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert "InferenceX validation accepted" in out
    assert "InferenceX draws HBM 0% · host 59% · unreused 41%" in out
    assert len(list(tmp_path.glob("bmk_agentic_*/*.json"))) == 1
    for args, message in ((["--format", "csv"], "--format 'csv' is not a format"),
                          ([], "no such file or directory")):
        target = [] if args else [str(tmp_path / "missing")]
        with pytest.raises(SystemExit) as e:
            main(["export", *args, *(target or [str(RUNS / "sglang" / "runs" / "hicache-c4")]),
                  "-o", str(tmp_path / "x")])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
