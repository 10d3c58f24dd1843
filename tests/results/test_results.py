"""result.json: building from stage files, validation rules, atomic round trip."""

from __future__ import annotations

import pytest
from fixtures.results_data import job_row, make_job, summarize_records, write_records
from fixtures.scrapes import golden_snapshots

from kvbench import SCHEMA_VERSION
from kvbench.errors import ResultError
from kvbench.files import read_json, write_json_atomic
from kvbench.metrics import summarize_snapshots
from kvbench.results import build_result, load_results, write_result


def _summary(tmp_path, *, n=40, error_every=0, offload=True):
    records = write_records(tmp_path / "records.jsonl", n=n, conc=4, offload=offload, seed=1,
                            error_every=error_every, warmup=0)
    return summarize_records(records, num_gpus=2)


def _build(tmp_path, *, row=None, summary=None, server=None, plan=None, status="ok", **kw):
    row = row or job_row("sglang", 4, offload=True)
    return build_result(job_row=row, config_key="k", plan=plan,
                        summary=summary if summary is not None else _summary(tmp_path),
                        server=server if server is not None else summarize_snapshots(
                            golden_snapshots("sglang"), "sglang"),
                        telemetry=None, status=status, fingerprint="fp", **kw)


def test_round_trip_identity_accounting_and_reference_names(tmp_path):
    job_dir, result = make_job(tmp_path, "sglang", 8, offload=True, repeat=2)
    assert (job_dir / "result.json").is_file()
    assert not list(job_dir.glob(".result.json.*"))  # atomic: no temp file left
    raw = read_json(job_dir / "result.json")
    assert raw["schema_version"] == SCHEMA_VERSION
    for key in ("hw", "conc", "model", "framework", "tp", "ep", "dp_attention",
                "kv_offloading", "kv_offload_backend", "allocated_cpu_dram_gb",
                "num_requests_total", "num_requests_successful", "request_accounting",
                "request_metrics", "server_metrics"):
        assert key in raw, key
    assert raw["request_accounting"]["records_warmup_dropped"] == 2
    assert raw["request_accounting"]["records_total"] == 60
    assert raw["num_gpus"] == 2 and raw["hw"] == "h200"
    assert raw["energy"]["j_per_output_token"] > 0
    [loaded] = load_results([tmp_path])
    assert loaded.repeat == 2 and loaded.arm == "sglang qwen3 tp2 offload-hicache"
    assert loaded.model_dump() == result.model_dump()


def test_failed_request_ratio_above_threshold_fails_the_job(tmp_path):
    # every 5th request fails: 20 % > 10 %
    r = _build(tmp_path, summary=_summary(tmp_path, error_every=5))
    assert r.status == "failed" and r.failure["stage"] == "validation"
    assert "20.0%" in r.failure["reason"]
    assert r.request_accounting["error_categories"] == {"http_5xx": 8}
    # the same run passes a looser threshold, and exactly-at-threshold passes (inclusive)
    assert _build(tmp_path, summary=_summary(tmp_path, error_every=5),
                  failed_request_threshold=0.2).status == "ok"
    assert _build(tmp_path, summary=_summary(tmp_path, error_every=20)).status == "ok"


def test_no_profiled_requests_fails(tmp_path):
    r = _build(tmp_path, summary={})
    assert r.status == "failed" and "nothing was measured" in r.failure["reason"]


def test_offload_arm_whose_host_tier_was_never_hit_is_flagged(tmp_path):
    snaps = golden_snapshots("sglang")
    for s in snaps:
        s["samples"]["sglang:cached_tokens_total"] = [
            x for x in s["samples"]["sglang:cached_tokens_total"]
            if x[0]["cache_source"] != "host"]
    r = _build(tmp_path, server=summarize_snapshots(snaps, "sglang"))
    codes = [f["code"] for f in r.validation["flags"]]
    assert codes == ["offload-tier-never-hit"] and r.status == "ok"
    assert any("never exercised" in w for w in r.warnings)


def test_labels_contradicting_the_engine_are_flagged(tmp_path):
    row = job_row("sglang", 4, offload=False)  # says resident; engine has a host pool
    row["spec-decoding"] = "mtp"  # says MTP; engine's accept length is 0
    r = _build(tmp_path, row=row, plan={"page_size_tokens": 32})  # engine runs 64
    codes = sorted(f["code"] for f in r.validation["flags"])
    assert codes == ["label-offload-mismatch", "label-page-size-mismatch",
                     "label-spec-mismatch"]


def test_absent_server_metrics_are_a_warning_not_a_failure(tmp_path):
    r = _build(tmp_path, server={"present": False, "warnings": ["no scrape file at x"]})
    assert r.status == "ok"
    assert "no scrape file at x" in r.warnings
    assert any("server metrics absent" in w for w in r.warnings)


def test_failed_job_keeps_its_failure(tmp_path):
    r = _build(tmp_path, summary={}, status="failed",
               failure={"stage": "launch", "reason": "OOM", "log_tail": "CUDA out of memory"})
    assert r.failure["stage"] == "launch" and r.validation["passed"] is False


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(ResultError, match="status 'done'"):
        _build(tmp_path, status="done")
    with pytest.raises(ResultError, match="threshold"):
        _build(tmp_path, failed_request_threshold=1.5)
    job_dir, result = make_job(tmp_path, "vllm", 4, offload=False)
    raw = read_json(job_dir / "result.json")
    raw["schema_version"] = 999
    write_json_atomic(job_dir / "result.json", raw)
    with pytest.raises(ResultError, match="schema_version 999"):
        load_results([tmp_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultError, match=r"no result\.json"):
        load_results([tmp_path / "empty"])
    write_result(job_dir, result)
    assert len(load_results([job_dir / "result.json"])) == 1
