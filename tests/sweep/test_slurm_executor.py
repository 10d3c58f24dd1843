"""The Slurm executor against real slurmctld + slurmd daemons on localhost (tests/fixtures/
slurm.py): job arrays whose tasks run the real `kvbench run-job`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO

from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.sweep import RunOptions, SlurmExecutor, build_specs
from kvbench.sweep.quickstart import RECIPE, quickstart_options

pytestmark = pytest.mark.slow


def executor(cluster) -> SlurmExecutor:
    env = {"SLURM_CONF": str(cluster.conf),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return SlurmExecutor(env=env, poll_interval_s=0.5, timeout_s=120)


def quickstart_specs(conc: int, options: RunOptions):
    selection = Selection(config_files=(RECIPE,), runner_config=RECIPE.parent / "runners.yaml",
                          min_conc=conc, max_conc=conc)
    jobs = select_jobs(selection)
    return build_specs(jobs, options, runner_config=RECIPE.parent / "runners.yaml")


def test_two_job_array_runs_run_job_and_collects_both(slurm_cluster, tmp_path: Path):
    options = quickstart_options(time_scale=50.0).model_copy(update={"max_requests": 6})
    specs = quickstart_specs(3, options)
    assert [s.row["kv-offloading"] for s in specs] == ["none", "dram"]
    ex = executor(slurm_cluster)
    outcomes = ex.run(specs, tmp_path)
    assert len(ex.submitted) == 1  # both CPU-only jobs share one array
    array_dirs = list((tmp_path / ".kvbench" / "slurm").iterdir())
    logs = "\n".join(p.read_text() for p in array_dirs[0].glob("task-*.log"))
    assert [o.status for o in outcomes] == ["ok", "ok"], (outcomes, logs)
    for spec in specs:
        result = read_json(tmp_path / spec.dir_name / "result.json")
        assert result["fingerprint"] == spec.fingerprint
        assert result["status"] == "ok"
    assert sorted(p.name for p in array_dirs[0].glob("task-*.log")) == ["task-0.log",
                                                                        "task-1.log"]
    # Resubmitting finds both done: nothing is submitted again.
    again = executor(slurm_cluster)
    assert [o.status for o in again.run(specs, tmp_path)] == ["skipped", "skipped"]
    assert again.submitted == []


def test_failed_tasks_are_collected_with_their_phase(slurm_cluster, tmp_path: Path):
    jobs = select_jobs(Selection(config_files=(RECIPE,), min_conc=3, max_conc=3))
    broken = [type(j)(j.config_key, {**j.row, "model": "no-such/model"}, j.scenario)
              for j in jobs]
    specs = build_specs(broken, RunOptions(max_requests=1),
                        runner_config=RECIPE.parent / "runners.yaml")
    outcomes = executor(slurm_cluster).run(specs, tmp_path)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert {o.phase for o in outcomes} == {"plan"}
    for spec in specs:
        result = read_json(tmp_path / spec.dir_name / "result.json")
        assert result["status"] == "failed" and result["failure"]["stage"] == "plan"


def test_real_engine_row_gets_its_gpus_and_the_whole_node(slurm_cluster, tmp_path: Path):
    """An sglang TP2 row asks Slurm for gres gpu:2 and exclusivity (the fixture's node has
    two fake GPUs); with no GPU here the server cannot start, and that failure comes back as
    the job's result."""
    import subprocess

    from kvbench.matrix import Job

    job = select_jobs(Selection(config_files=(RECIPE,), min_conc=3, max_conc=3))[0]
    row = {**job.row, "framework": "sglang", "image": "lmsysorg/sglang:v0.5.16-cu130",
           "tp": 2, "exp-name": "qwen3-32b_tp2_conc3_kvnone"}
    specs = build_specs([Job(job.config_key, row, job.scenario)],
                        RunOptions(max_requests=1, timeouts={"ready_s": 30}),
                        runner_config=RECIPE.parent / "runners.yaml")
    ex = executor(slurm_cluster)
    [outcome] = ex.run(specs, tmp_path)
    shown = subprocess.run(["scontrol", "show", "job", ex.submitted[0]], capture_output=True,
                           text=True, env=slurm_cluster.env).stdout
    assert "TresPerNode=gres:gpu:2" in shown, shown
    assert "OverSubscribe=NO" in shown, shown  # --exclusive
    assert outcome.status == "failed" and outcome.phase in ("launch", "ready"), outcome
    result = read_json(tmp_path / specs[0].dir_name / "result.json")
    assert result["failure"]["stage"] == outcome.phase


def test_kvbench_run_with_the_slurm_executor(slurm_cluster, tmp_path: Path):
    """The CLI path: `kvbench run --executor slurm` submits, waits, collects, reports."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "SLURM_CONF": str(slurm_cluster.conf),
           "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(RECIPE), "--executor", "slurm",
         "--min-conc", "6", "--max-conc", "6", "--time-scale", "100", "--max-requests", "6",
         "--think-time-scale", "0", "--results", str(tmp_path), "--format", "json",
         "--partition", slurm_cluster.partition, "--time-limit", "10"],
        capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr
    outcomes = json.loads(out.stdout)
    assert [o["status"] for o in outcomes] == ["ok", "ok"]
    assert (tmp_path / "dashboard.html").exists()
