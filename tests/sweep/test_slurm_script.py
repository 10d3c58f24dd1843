"""The sbatch script and resource grouping of the Slurm executor, and the CI matrix."""

from __future__ import annotations

from pathlib import Path

from kvbench.matrix import Job
from kvbench.sweep import RunOptions, SlurmExecutor, build_specs
from kvbench.sweep.emit import github_matrix
from kvbench.sweep.slurm import Resources

SIM = {"exp-name": "a", "framework": "sim", "model": "m", "runner": "cluster:x", "tp": 2,
       "pp": 1, "pcp-size": 1, "conc": 2}
SGL = {**SIM, "exp-name": "b", "framework": "sglang", "tp": 4, "pp": 2}


def specs():
    jobs = [Job("k", SIM, "agentic-coding"), Job("k", SGL, "agentic-coding")]
    return build_specs(jobs, RunOptions())


def test_resources_per_framework():
    sim, sgl = specs()
    assert Resources.of(sim) == Resources(gpus=0, exclusive=False)
    assert Resources.of(sgl) == Resources(gpus=8, exclusive=True)


def test_script_requests_gpus_and_exclusivity(tmp_path: Path):
    _, sgl = specs()
    ex = SlurmExecutor(partition="gpu", time_limit="08:00:00", max_parallel=2,
                       sbatch_args=["--qos=high"], python="/opt/py/bin/python")
    text = ex.script([sgl, sgl], Resources.of(sgl), tmp_path / "arr", tmp_path / "res")
    lines = text.splitlines()
    assert "#SBATCH --array=0-1%2" in lines
    assert "#SBATCH --gres=gpu:8" in lines and "#SBATCH --exclusive" in lines
    assert "#SBATCH --partition=gpu" in lines and "#SBATCH --time=08:00:00" in lines
    assert "#SBATCH --qos=high" in lines
    assert lines[-1] == (f"exec /opt/py/bin/python -m kvbench run-job --job-file "
                         f"{tmp_path}/arr/jobs/${{SLURM_ARRAY_TASK_ID}}.json "
                         f"--results {tmp_path}/res")


def test_cpu_only_script_has_no_gres(tmp_path: Path):
    sim, _ = specs()
    text = SlurmExecutor().script([sim], Resources.of(sim), tmp_path, tmp_path)
    assert "--gres" not in text and "--exclusive" not in text


def test_github_matrix_carries_whole_spec():
    out = github_matrix(specs())
    assert [e["name"] for e in out["include"]] == ["a", "b"]
    assert out["include"][1]["gpus"] == 8
    assert out["include"][0]["job"]["row"] == SIM


def test_multinode_rows_are_reported_not_submitted(tmp_path: Path):
    row = {**SGL, "exp-name": "mn", "conc": [8],
           "prefill": {"num-worker": 1, "tp": 8, "pp": 1, "pcp-size": 1},
           "decode": {"num-worker": 1, "tp": 8, "pp": 1, "pcp-size": 1}}
    [spec] = build_specs([Job("k", row, "agentic-coding")], RunOptions())
    ex = SlurmExecutor()
    [outcome] = ex.run([spec], tmp_path)
    assert ex.submitted == []  # sbatch was never called
    assert outcome.status == "failed" and outcome.phase == "slurm"
    assert "multi-node" in outcome.reason
