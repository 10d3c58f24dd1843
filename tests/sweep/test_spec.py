"""Job specs: fingerprints, directory names, job files, resume decisions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvbench import SCHEMA_VERSION
from kvbench.errors import SweepError
from kvbench.matrix import Job
from kvbench.sweep import JobSpec, RunOptions, build_specs, job_fingerprint, layout
from kvbench.sweep.options import PhaseTimeouts

ROW = {"exp-name": "qwen3-8b_tp1_conc2_kvnone", "framework": "sim", "model": "Qwen/Qwen3-8B",
       "runner": "cluster:h100-sim", "tp": 1, "pp": 1, "pcp-size": 1, "conc": 2,
       "kv-offloading": "none", "duration": 3600}


def job(**changes) -> Job:
    return Job(config_key="k", row={**ROW, **changes}, scenario="agentic-coding")


def test_fingerprint_is_stable_and_order_free():
    a = job_fingerprint(ROW)
    assert a == job_fingerprint(dict(reversed(list(ROW.items()))))
    assert len(a) == 64
    assert a != job_fingerprint({**ROW, "conc": 4})


def test_fingerprint_covers_workload_not_timeouts():
    base = RunOptions(max_requests=10)
    assert job_fingerprint(ROW, base) != job_fingerprint(ROW, RunOptions(max_requests=11))
    slow = RunOptions(max_requests=10, timeouts=PhaseTimeouts(ready_s=5), scrape_interval_s=3)
    assert job_fingerprint(ROW, base) == job_fingerprint(ROW, slow)


def test_fingerprint_covers_schema_version(monkeypatch):
    import kvbench.sweep.spec as spec_mod

    before = job_fingerprint(ROW)
    monkeypatch.setattr(spec_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    assert job_fingerprint(ROW) != before


def test_dir_names_repeats_and_collisions():
    jobs = [job(), job(conc=4, **{"exp-name": "x_conc4"}), job(ep=2)]  # 0 and 2 share exp-name
    specs = build_specs(jobs, RunOptions(), repeats=2)
    names = [s.dir_name for s in specs]
    assert len(set(names)) == 6
    assert "x_conc4" in names and "x_conc4__r1" in names
    fp0 = job_fingerprint(jobs[0].row, RunOptions(), "k")
    assert f"{ROW['exp-name']}__{fp0[:8]}" in names
    assert [s.repeat for s in specs] == [0, 0, 0, 1, 1, 1]  # repeat-major


def test_identical_rows_of_two_config_keys_are_two_jobs():
    twin = Job(config_key="k-power-ab", row=dict(ROW), scenario="agentic-coding")
    specs = build_specs([job(), twin], RunOptions())
    assert specs[0].fingerprint != specs[1].fingerprint
    assert len({s.dir_name for s in specs}) == 2


def test_same_job_twice_is_an_error():
    with pytest.raises(SweepError, match="same job twice"):
        build_specs([job(), job()], RunOptions())


def test_job_file_round_trip(tmp_path: Path):
    (tmp_path / "t.json").write_text("[]")
    spec = build_specs([job()], RunOptions(trace=[tmp_path / "t.json"], max_requests=3))[0]
    path = spec.write(tmp_path / "job.json")
    again = JobSpec.read(path)
    assert again == spec
    assert again.job() == job()
    assert orjson.loads(path.read_bytes())["fingerprint"] == spec.fingerprint


def test_missing_trace_is_a_clear_error(tmp_path: Path):
    from kvbench.errors import WorkloadError

    with pytest.raises(WorkloadError, match="no such trace file"):
        build_specs([job()], RunOptions(trace=[tmp_path / "nope.json"]))


def test_bad_job_file(tmp_path: Path):
    (tmp_path / "job.json").write_text('{"config_key": "k"}')
    with pytest.raises(SweepError, match="cannot read job file"):
        JobSpec.read(tmp_path / "job.json")


def test_resume_decision(tmp_path: Path):
    fp = "f" * 64
    assert not layout.is_done(tmp_path, fp)
    (tmp_path / "result.json").write_text('{"fingerprint": "' + fp + '", "status": "ok"}')
    assert layout.is_done(tmp_path, fp)
    assert not layout.is_done(tmp_path, "e" * 64)  # the row or workload changed
    (tmp_path / "result.json").write_text('{"fingerprint": "' + fp + '", "status": "failed"}')
    assert not layout.is_done(tmp_path, fp)
    assert layout.is_done(tmp_path, fp, rerun_failed=False)
    (tmp_path / "result.json").write_text('{"fingerprint": "' + fp[:10])  # torn
    assert not layout.is_done(tmp_path, fp)


def test_clear_attempt_keeps_job_file(tmp_path: Path):
    for name in ("job.json", "records.jsonl", "scrape.jsonl", "result.json", "server.log",
                 "result.orig.json"):
        (tmp_path / name).write_text("x")
    layout.clear_attempt(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]


def test_fingerprint_counts_traces_by_content(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "t.json").write_text('{"x": 1}')
    assert job_fingerprint(ROW, RunOptions(trace=[a])) == job_fingerprint(
        ROW, RunOptions(trace=[b / "t.json"]))
    (b / "t.json").write_text('{"x": 2}')
    assert job_fingerprint(ROW, RunOptions(trace=[a])) != job_fingerprint(
        ROW, RunOptions(trace=[b]))


def test_bundled_traces_are_resolved_where_the_job_runs():
    from kvbench.sweep import bundled_traces

    options = RunOptions(bundled_traces=True)
    assert options.trace_paths() == bundled_traces()
    assert len(bundled_traces()) == 8
    assert "bundled_traces" not in options.measurement_identity()
    assert options.measurement_identity()["trace"][0].startswith("trace_0076.json.gz:")
    assert RunOptions().trace_paths() is None  # synthetic


def test_whole_real_catalog_gets_unique_directories():
    from conftest import INFERENCEX

    from kvbench.matrix import Selection, select_jobs

    jobs = select_jobs(Selection(config_files=(INFERENCEX / "nvidia-master.yaml",
                                               INFERENCEX / "amd-master.yaml")))
    specs = build_specs(jobs, RunOptions())
    assert len(specs) == 746
    assert len({s.dir_name for s in specs}) == 746
    assert len({s.fingerprint for s in specs}) == 746


def test_a_directory_another_jobs_files_hold_is_not_taken(tmp_path):
    """Two keys whose rows differ only where the exp-name does not look (the H200 SGLang runs:
    HiCache write_through vs write_through_selective), run by separate `kvbench run` calls
    into one results directory: the second gets the fingerprint suffix instead of clearing
    the first's result; the same job again (other options too) keeps its directory."""
    through = job(**{"kv-offloading": "dram", "kv-offload-backend": {"name": "hicache",
                     "write-policy": "write_through"}})
    selective = Job(config_key="k-selective", row={**through.row, "kv-offload-backend": {
        "name": "hicache", "write-policy": "write_through_selective"}}, scenario=through.scenario)
    [first] = build_specs([through], RunOptions(), results=tmp_path)
    assert first.dir_name == ROW["exp-name"]
    first.write(tmp_path / first.dir_name / layout.JOB_FILE)

    [second] = build_specs([selective], RunOptions(), results=tmp_path)
    assert second.dir_name == f"{ROW['exp-name']}__{second.fingerprint[:8]}"
    again = build_specs([through], RunOptions(max_requests=3), repeats=2, results=tmp_path)
    assert [s.dir_name for s in again] == [ROW["exp-name"], ROW["exp-name"] + "__r1"]
    # a stray job.json that is not a job's (no config_key) is another job's too
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / layout.JOB_FILE).write_text("[1]")
    [plain] = build_specs([job(**{"exp-name": "other"})], RunOptions(), results=tmp_path)
    assert plain.dir_name == "other"
