"""`kvbench rescore` on a real run: vLLM 0.26's simple CPU offload at conc 12 on the H200
(benchmarks/results/h200/vllm/runs/), as `kvbench run` wrote it on the device. Its result
said "recipe says kv-offloading=dram but the engine reports offload off": the simple connector
exports no kv_offload_* counters and its tier never hit. Rescored with the adapter that reads
the connector's lookups, the label check passes and the true finding stays: the host tier
was never hit (twelve ~20K-token contexts exceed the 24 GB pool)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbench.cli import main

RUN = (Path(__file__).resolve().parents[2] / "benchmarks/results/h200/vllm/runs"
       / "qwen3-8b_tp1_conc12_kvdram-vllm-simple")


@pytest.fixture
def job(tmp_path) -> Path:
    """The job directory with the run's own result.json back in place."""
    d = tmp_path / RUN.name
    shutil.copytree(RUN, d)
    if (d / "result.orig.json").exists():
        (d / "result.orig.json").replace(d / "result.json")
    return d


def _codes(result: dict) -> set[str]:
    return {f["code"] for f in result["validation"]["flags"]}


def test_rescore_applies_todays_adapter_and_keeps_the_measurements(job, capsys):
    run = json.loads((job / "result.json").read_text())
    assert "label-offload-mismatch" in _codes(run)  # what the device wrote
    main(["rescore", str(job.parent), "--format", "json"])
    [row] = json.loads(capsys.readouterr().out)
    assert row["status"] == ["ok", "ok"] and row["valid"] == [False, False]
    new = json.loads((job / "result.json").read_text())
    assert "label-offload-mismatch" not in _codes(new)
    assert new["validity"]["checks"]["label"]["passed"] is True
    assert new["validity"]["checks"]["offload_tier"]["passed"] is False
    assert new["server_metrics"]["engine_reported"]["offload_enabled"] is True
    assert new["server_metrics"]["counters"]["connector_lookups"] > 0
    # the same measurements, the same identity, the clock of the run
    for key in ("request_metrics", "request_accounting", "fingerprint", "telemetry",
                "created_at", "plan", "job_row"):
        assert new[key] == run[key], key
    assert any(w.startswith("rescored by kvbench") for w in new["warnings"])
    # the duration the replay ran (run.sh: --duration 50), not the matrix default in the row
    assert (run["duration_s"], new["duration_s"], new["job_row"]["duration"]) == (3600, 50, 3600)
    assert json.loads((job / "result.orig.json").read_text()) == run


def test_second_rescore_keeps_the_first_original_and_one_stamp(job):
    run = json.loads((job / "result.json").read_text())
    main(["rescore", str(job)])
    main(["rescore", str(job)])
    assert json.loads((job / "result.orig.json").read_text()) == run
    warnings = json.loads((job / "result.json").read_text())["warnings"]
    assert sum(w.startswith("rescored by kvbench") for w in warnings) == 1


def test_dry_run_writes_nothing(job, capsys):
    before = (job / "result.json").read_bytes()
    main(["rescore", str(job), "--dry-run"])
    assert "would be rescored" in capsys.readouterr().out
    assert (job / "result.json").read_bytes() == before
    assert not (job / "result.orig.json").exists()


def test_a_job_without_its_replay_summary_is_one_line_and_exit_2(job, capsys):
    (job / "summary.json").unlink()
    with pytest.raises(SystemExit) as e:
        main(["rescore", str(job)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no summary.json" in err and "Traceback" not in err


def test_a_result_older_than_its_options_id_gets_it_from_job_json(job):
    """Session 1 wrote no options_id; its job.json holds the options. The id derived from it
    equals the one `kvbench run` recorded on the device for a session-3 job of the same sweep
    options, so old and new repeats pool (conc 4: resident x2, native x2, simple x2)."""
    assert json.loads((job / "result.json").read_text()).get("options_id") is None
    spec = json.loads((job / "job.json").read_text())
    # the device's absolute trace path; the same traces are in this checkout
    spec["options"]["trace"] = [str(RUN.parents[5] / "benchmarks/gpu/vllm/traces")]
    (job / "job.json").write_text(json.dumps(spec))
    new = json.loads((RUN.parent / "qwen3-8b_tp1_conc6_kvnone" / "result.orig.json").read_text())
    main(["rescore", str(job)])
    assert json.loads((job / "result.json").read_text())["options_id"] == new["options_id"]


def test_without_job_json_the_options_id_stays_unknown(job):
    (job / "job.json").unlink()
    main(["rescore", str(job)])
    assert json.loads((job / "result.json").read_text())["options_id"] is None


def test_traces_gone_leave_the_options_id_unknown(job):
    spec = json.loads((job / "job.json").read_text())
    spec["options"]["trace"] = [str(job / "no-such-traces")]
    (job / "job.json").write_text(json.dumps(spec))
    main(["rescore", str(job)])
    assert json.loads((job / "result.json").read_text())["options_id"] is None


def test_an_sglang_run_gets_its_zero_hits_from_the_records(tmp_path, capsys):
    """The real SGLang 0.5.17 resident conc-6 run (benchmarks/results/h200/sglang/): its replay
    read SGLang's usage without prompt_tokens_details (SGLang leaves it out when nothing was
    cached) as unknown; rescore reads the records again with the engine's meaning, 0."""
    src = RUN.parents[2] / "sglang" / "runs" / "resident-c6"
    d = tmp_path / src.name
    shutil.copytree(src, d)
    if (d / "result.orig.json").exists():
        (d / "result.orig.json").replace(d / "result.json")
    run = json.loads((d / "result.json").read_text())
    assert run["request_metrics"]["cache"]["hit_rate"] is None
    main(["rescore", str(d)])
    new = json.loads((d / "result.json").read_text())
    # 24 requests, none of them a hit: six 16K-token sessions do not fit 43,648 GPU tokens
    assert new["request_metrics"]["cache"] == {
        "prompt_tokens": 461_076, "cached_tokens": 0, "hit_rate": 0.0,
        "ideal_hit_rate": run["request_metrics"]["cache"]["ideal_hit_rate"]}
    assert new["validity"]["checks"]["ideal_cache"]["achieved"]["total"] == 0.0
    for key in ("request_accounting", "fingerprint", "created_at", "plan"):
        assert new[key] == run[key], key
