"""The sbatch script and resource grouping of the Slurm executor, and the CI matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.errors import SweepOptionError
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


@pytest.mark.parametrize("kw, flag", [
    ({"partition": "gpu\n#SBATCH --foo"}, "--partition"),
    ({"partition": "gpu\rrm -rf ~"}, "--partition"),
    ({"partition": "gpu; rm -rf ~"}, "--partition"),
    ({"account": "acct\nexit 0"}, "--account"),
    ({"time_limit": "8h\n#SBATCH --nodes=64"}, "--time-limit"),
    ({"sbatch_args": ["--qos=high\nsrun evil"]}, "--sbatch-arg"),
    ({"sbatch_args": ["echo hi"]}, "--sbatch-arg"),
    ({"max_parallel": 0}, "--max-parallel"),
])
def test_a_value_that_would_inject_a_script_line_is_refused(kw, flag):
    """Issue 40: a newline in --partition became a shell line of array.sbatch and silently
    dropped the --array, --nodes and --gres directives after it."""
    with pytest.raises(SweepOptionError) as e:
        SlurmExecutor(**kw)
    assert str(e.value).startswith(flag) and "allowed:" in str(e.value)
    assert e.value.exit_code == 2


def test_a_results_path_with_a_newline_is_refused(tmp_path: Path):
    sim, _ = specs()
    with pytest.raises(SweepOptionError, match="control character"):
        SlurmExecutor().script([sim], Resources.of(sim), tmp_path / "a\nb", tmp_path)


def test_every_directive_survives_hostile_values_that_are_accepted(tmp_path: Path):
    _, sgl = specs()
    ex = SlurmExecutor(partition="gpu,debug", account="a.b-c_d", time_limit="1-02:00",
                       sbatch_args=["--comment=x; y && z"])
    lines = ex.script([sgl], Resources.of(sgl), tmp_path / "arr", tmp_path / "res"
                      ).splitlines()
    directives = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert lines[0] == "#!/bin/bash" and lines[len(directives) + 1] == "set -euo pipefail"
    assert "#SBATCH --array=0-0" in directives and "#SBATCH --gres=gpu:8" in directives


def test_cpu_only_script_has_no_gres(tmp_path: Path):
    sim, _ = specs()
    text = SlurmExecutor().script([sim], Resources.of(sim), tmp_path, tmp_path)
    assert "--gres" not in text and "--exclusive" not in text


def test_github_matrix_carries_whole_spec():
    out = github_matrix(specs())
    assert [e["name"] for e in out["include"]] == ["a", "b"]
    assert out["include"][1]["gpus"] == 8
    assert out["include"][0]["job"]["row"] == SIM


def _multinode(prefill: dict, decode: dict):
    row = {**SGL, "exp-name": "mn", "conc": [8], "prefill": prefill, "decode": decode}
    [spec] = build_specs([Job("k", row, "agentic-coding")], RunOptions())
    return spec


def test_multinode_row_gets_one_allocation_with_a_task_per_worker(tmp_path: Path):
    tp8 = {"num-worker": 1, "tp": 8, "pp": 1, "pcp-size": 1, "ep": 1, "dp-attn": False}
    spec = _multinode(tp8, tp8)
    text = SlurmExecutor(partition="gpu", python="/opt/py/bin/python").multinode_script(
        spec, tmp_path / "mn", tmp_path / "res")
    lines = text.splitlines()
    # two TP8 workers on 8-GPU nodes: a node each
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --ntasks=2" in lines
    assert "#SBATCH --gres=gpu:8" in lines and "#SBATCH --exclusive" in lines
    assert "#SBATCH --partition=gpu" in lines
    assert f"#SBATCH --output={tmp_path}/mn/task.log" in lines
    assert "--array" not in text
    assert lines[-1] == (f"exec /opt/py/bin/python -m kvbench run-job --job-file "
                         f"{tmp_path}/mn/job.json --results {tmp_path}/res")


def test_multinode_node_count_follows_worker_sizes(tmp_path: Path):
    tp4x2 = {"num-worker": 2, "tp": 4, "pp": 1, "pcp-size": 1, "ep": 1, "dp-attn": False}
    tp16 = {"num-worker": 1, "tp": 8, "pp": 2, "pcp-size": 1, "ep": 1, "dp-attn": False}
    text = SlurmExecutor().multinode_script(_multinode(tp4x2, tp16), tmp_path, tmp_path)
    # 2 prefill workers of 4 GPUs take a node each (workers never share GPU nodes), the
    # 16-GPU decode worker takes two: 1 + 1 + 2
    assert "#SBATCH --nodes=4" in text.splitlines()
    assert "#SBATCH --ntasks=3" in text.splitlines()


def test_aggregated_row_allocates_the_generators_node_count(tmp_path: Path):
    """Newer layout: an aggregated `worker:` row (decode num-worker 0) asks for the nodes its
    `num-nodes` / node-count names, even when its one worker needs fewer GPUs."""
    tp8 = {"num-worker": 1, "tp": 8, "pp": 1, "pcp-size": 1, "ep": 1, "dp-attn": False}
    row = {**SGL, "exp-name": "agg", "conc": [8], "prefill": tp8,
           "decode": {**tp8, "num-worker": 0}, "node-count": 2}
    [spec] = build_specs([Job("k", row, "agentic-coding")], RunOptions())
    lines = SlurmExecutor().multinode_script(spec, tmp_path, tmp_path).splitlines()
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --ntasks=1" in lines
