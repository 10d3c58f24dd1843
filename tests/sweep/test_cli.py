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
                  "--max-conc", "6")
    assert out.returncode == 0, out.stderr
    include = json.loads(out.stdout)["include"]
    names = [e["name"] for e in include]
    assert len(names) == 8 and len(set(names)) == 8
    assert "qwen3-32b_tp1_conc6_kvdram-hicache__r1" in names
    job = include[0]["job"]
    assert job["row"]["framework"] == "sim"
    assert job["options"]["bundled_traces"] and job["options"]["trace"] is None  # portable
    # relative to the checkout the command ran in: a runner with its own checkout opens them
    assert job["runner_config"] == "examples/runners.yaml"
    assert job["config_file"] == "examples/quickstart.yaml"


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
    out = kvbench("run", str(RECIPE), "--emit", "github-matrix", "--max-conc", "3",
                  "--max-requests", "3", "--think-time-scale", "0")
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
    assert out.returncode == 2 and "--stand-in sim runs the multi-node rows of sglang-disagg" \
        in out.stderr
    assert "also has sim jobs" in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_two_write_policies_run_apart_keep_both_results(tmp_path):
    """The H200 SGLang arms in miniature: two keys that differ only in the HiCache write policy
    share an exp-name; run by two `kvbench run` calls into one results directory, each keeps
    its own result (before, the second cleared the first's), and a rerun skips both."""
    text = RECIPE.read_text()
    assert "kv-offload-backend: { name: hicache }" in text
    for policy in ("write_through", "write_through_selective"):
        recipe = tmp_path / f"{policy}.yaml"
        resident = "          - { tp: 1, kv-offloading: none, conc-list: [3, 6, 12] }\n"
        assert resident in text
        recipe.write_text(text.replace(resident, "").replace(
            "qwen3-32b-fp8-h100-sim-agentic:",
            f"qwen3-32b-fp8-h100-sim-agentic-{policy}:").replace(
            "{ name: hicache }", f"{{ name: hicache, write-policy: {policy} }}"))
        (tmp_path / "runners.yaml").write_text((RECIPE.parent / "runners.yaml").read_text())
        out = kvbench("run", str(recipe), "--results", str(tmp_path / "r"), "--min-conc", "3",
                      "--max-conc", "3", "--max-requests", "3", "--format", "json",
                      "--no-dashboard")
        assert out.returncode == 0, out.stderr
    results = sorted((tmp_path / "r").glob("*/result.json"))
    keys = sorted(json.loads(p.read_text())["config_key"] for p in results)
    assert keys == ["qwen3-32b-fp8-h100-sim-agentic-write_through",
                    "qwen3-32b-fp8-h100-sim-agentic-write_through_selective"]
    out = kvbench("run", str(tmp_path / "write_through_selective.yaml"), "--results",
                  str(tmp_path / "r"), "--min-conc", "3", "--max-conc", "3", "--max-requests", "3",
                  "--format", "json", "--no-dashboard")
    assert out.returncode == 0 and [o["status"] for o in json.loads(out.stdout)] == ["skipped"]


def test_a_run_with_config_keys_resumes_in_a_later_call(tmp_path):
    """Issue 37 call 5: `--config-keys K` in one call, then `--repeat 2` in the next. The
    first call's repeat is done and skipped, the second runs beside it: no job takes its own
    earlier directory for another job's (the key was redacted in job.json, issue 37), and every
    job file names its config key. ~10 s: two embedded-engine runs of 3 requests."""
    key = "qwen3-32b-fp8-h100-sim-agentic"
    base = ["run", str(RECIPE), "--config-keys", key, "--exp-name", "qwen3-32b_tp1_conc3_kvnone",
            "--results", str(tmp_path), "--max-requests", "3", "--time-scale", "100",
            "--think-time-scale", "0", "--format", "json", "--no-dashboard"]
    first = kvbench(*base)
    assert first.returncode == 0, first.stderr
    again = kvbench(*base, "--repeat", "2")
    assert again.returncode == 0, again.stderr
    assert [o["status"] for o in json.loads(again.stdout)] == ["skipped", "ok"]
    dirs = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert dirs == ["qwen3-32b_tp1_conc3_kvnone", "qwen3-32b_tp1_conc3_kvnone__r1"]
    for d in dirs:
        assert json.loads((tmp_path / d / "job.json").read_text())["config_key"] == key
        assert json.loads((tmp_path / d / "result.json").read_text())["config_key"] == key
