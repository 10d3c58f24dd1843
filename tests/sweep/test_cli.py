"""`kvbench run` argument handling and `--emit github-matrix`, through the CLI boundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

RECIPE = REPO / "examples" / "quickstart.yaml"


def kvbench(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kvbench", *args], capture_output=True,
                          text=True, env=env, cwd=REPO)


def test_emit_github_matrix():
    out = kvbench("run", str(RECIPE), "--emit", "github-matrix", "--repeat", "2",
                  "--max-conc", "4")
    assert out.returncode == 0, out.stderr
    include = json.loads(out.stdout)["include"]
    names = [e["name"] for e in include]
    assert len(names) == 8 and len(set(names)) == 8
    assert "qwen3-8b_tp1_conc4_kvdram-hicache__r1" in names
    job = include[0]["job"]
    assert job["row"]["framework"] == "sim"
    assert job["options"]["bundled_traces"] and job["options"]["trace"] is None  # portable
    assert job["runner_config"].endswith("examples/runners.yaml")


def test_run_without_recipe():
    out = kvbench("run", "--results", "/tmp/x")
    assert out.returncode == 2  # bad input (SweepOptionError)
    assert "no recipe given" in out.stderr


def test_unknown_executor_and_emit(tmp_path):
    out = kvbench("run", str(RECIPE), "--executor", "k8s", "--results", str(tmp_path))
    assert out.returncode == 2 and "--executor 'k8s' is not one of local, slurm" in out.stderr
    out = kvbench("run", str(RECIPE), "--emit", "gitlab", "--results", str(tmp_path))
    assert out.returncode == 2 and "--emit 'gitlab'" in out.stderr


def test_empty_selection(tmp_path):
    out = kvbench("run", str(RECIPE), "--min-conc", "1000", "--results", str(tmp_path))
    assert out.returncode == 3 and "matched no jobs" in out.stderr


def test_run_job_needs_one_spec_source(tmp_path):
    out = kvbench("run-job", "--results", str(tmp_path))
    assert out.returncode == 3 and "exactly one of --job-file or --job-json" in out.stderr
    out = kvbench("run-job", "--job-json", "{}", "--results", str(tmp_path))
    assert out.returncode == 3 and "not a valid job spec" in out.stderr


@pytest.mark.slow
def test_github_matrix_entry_runs_with_run_job(tmp_path):
    """What a CI matrix job does: take one entry's spec and run it with --job-json."""
    out = kvbench("run", str(RECIPE), "--emit", "github-matrix", "--max-conc", "2",
                  "--max-requests", "3", "--time-scale", "100", "--think-time-scale", "0")
    entry = json.loads(out.stdout)["include"][1]
    ran = kvbench("run-job", "--job-json", json.dumps(entry["job"]), "--results", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"{entry['name']}: ok")
    result = json.loads((tmp_path / entry["name"] / "result.json").read_text())
    assert result["fingerprint"] == entry["fingerprint"] and result["status"] == "ok"
    again = kvbench("run-job", "--job-json", json.dumps(entry["job"]), "--results", str(tmp_path))
    assert "done already" in again.stdout


def test_time_scale_is_for_the_embedded_engine_only(tmp_path):
    configs = REPO / "tests" / "data" / "inferencex"
    out = kvbench("run", str(configs / "nvidia-master.yaml"), "--config-keys",
                  "dsv4-fp4-b200-vllm-agentic-mtp", "--time-scale", "10", "--results",
                  str(tmp_path))
    assert out.returncode == 2
    assert "--time-scale is for the embedded engine only" in out.stderr
    assert "vllm" in out.stderr


def test_stand_in_is_checked_before_any_job_runs(tmp_path):
    out = kvbench("run", str(RECIPE), "--stand-in", "vllm", "--results", str(tmp_path))
    assert out.returncode == 2 and "--stand-in 'vllm' is not allowed (allowed: sim)" in out.stderr
    # the quickstart's rows are the embedded engine's own: nothing to stand in for
    out = kvbench("run", str(RECIPE), "--stand-in", "sim", "--results", str(tmp_path))
    assert out.returncode == 2 and "--stand-in sim runs sglang-disagg rows" in out.stderr
    assert "also has sim jobs" in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())
