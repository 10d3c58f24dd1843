"""Issue 37: the unpatched Qwen3.5 HiCache + MTP arm (benchmarks/gpu/qwen3.5/recipe.yaml) on an
engine that dies the way SGLang <= 0.5.17 does (seed 000): the scheduler logs the traceback,
SIGQUITs the launcher, which kills its own process tree (sglang 0.5.17
srt/managers/scheduler.py:4949-4952, srt/entrypoints/engine.py:1649-1653). kvbench names the
cause from the log line, not from the SIGKILL exit (which alone reads as the host OOM killer),
fails the job with that line and goes on to the next job of the sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.sweep import build_specs, run_local
from kvbench.sweep.options import PhaseTimeouts, RunOptions

RECIPE = REPO / "benchmarks" / "gpu" / "qwen3.5" / "recipe.yaml"
RUNNERS = RECIPE.parent / "runners.yaml"
CRASH = "AttributeError: 'HybridLinearKVPool' object has no attribute 'layer_num'"
# the server log as 0.5.17 formats a scheduler that dies at start-up
LOG = [
    "[2026-12-03 10:00:00] server_args=ServerArgs(model_path=...)",
    "[2026-12-03 10:00:09] Load weight end. elapsed=3.1 s, "
    "type=Qwen3_5MoeForConditionalGeneration",
    "[2026-12-03 10:00:12] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/tmp/sgsite/sglang/srt/managers/scheduler.py", line 4926, in '
    "run_scheduler_process",
    CRASH,
    "",
    "[2026-12-03 10:00:12] Received sigquit from a child process. It usually means the "
    "child failed.",
]


@pytest.fixture
def crashing_sglang(tmp_path, monkeypatch) -> Path:
    """A `sglang` package first on the server's path whose launch_server starts, logs the
    scheduler's exception as 0.5.17 formats it, and dies the way its SIGQUIT handler makes it."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(textwrap.dedent(f"""
        import os, signal, time
        for line in {LOG!r}:
            print(line, flush=True)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return site


def test_the_unpatched_arm_fails_with_the_crash_line_and_the_sweep_goes_on(crashing_sglang,
                                                                           tmp_path):
    key = "qwen3.5-bf16-h200-sglang-agentic-mtp-unpatched"
    jobs = [j for j in select_jobs(Selection(config_files=(RECIPE,), config_keys=(key,)))
            if j.row["kv-offloading"] == "dram"]
    assert len(jobs) == 1 and "patches" not in jobs[0].row
    model = tmp_path / "model"
    model.mkdir()
    options = RunOptions(load_format="dummy", model_path=str(model), max_requests=2,
                         timeouts=PhaseTimeouts(ready_s=60.0))
    specs = build_specs(jobs, options, runner_config=RUNNERS, repeats=2)
    assert len(specs) == 2
    outcomes = run_local(specs, tmp_path / "results", continue_on_error=True)
    assert [o.status for o in outcomes] == ["failed", "failed"]  # the second job still ran
    for spec, outcome in zip(specs, outcomes, strict=True):
        assert CRASH in outcome.reason, outcome
        launch = read_json(tmp_path / "results" / spec.dir_name / "result.json")["failure"][
            "launch"]
        assert (launch["signature"], launch["signature-line"], launch["returncode"]) == \
            ("hybrid_pool_layer_num", CRASH, -9)


def test_the_patch_reaches_the_hicache_arm_only_and_the_resident_launch_is_unchanged(tmp_path):
    """The patched key's resident arm renders the very launch of the unpatched key's: the patch
    is scoped to `arms: [hicache]`, as `kvbench recipe mirror` writes it."""
    def launches(key: str) -> dict[str, dict]:
        res = subprocess.run(
            [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
             "--config-files", str(RECIPE), "--runner-config", str(RUNNERS), "--config-keys",
             key, "--max-conc", "4", "--load-format", "dummy", "--model-path", str(tmp_path)],
            capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return {j["row"]["kv-offloading"]: j for j in json.loads(res.stdout)}

    scope = {(j.config_key, j.row["kv-offloading"], j.row["conc"]): [
        p["id"] for p in j.row.get("patches", [])]
        for j in select_jobs(Selection(config_files=(RECIPE,), max_conc=4, config_keys=(
            "qwen3.5-bf16-h200-sglang-agentic-mtp*",)))}
    assert scope == {("qwen3.5-bf16-h200-sglang-agentic-mtp", "none", 4): [],
                     ("qwen3.5-bf16-h200-sglang-agentic-mtp", "dram", 4): ["sglang-34560"],
                     ("qwen3.5-bf16-h200-sglang-agentic-mtp-unpatched", "none", 4): [],
                     ("qwen3.5-bf16-h200-sglang-agentic-mtp-unpatched", "dram", 4): []}
    patched = launches("qwen3.5-bf16-h200-sglang-agentic-mtp")
    unpatched = launches("qwen3.5-bf16-h200-sglang-agentic-mtp-unpatched")
    for field in ("argv", "env", "files", "served-model-name"):
        assert patched["none"][field] == unpatched["none"][field], field
    # the dummy model's own tokenizer, not the HF id the qwen3.5 rules name
    argv = patched["dram"]["argv"]
    assert argv[argv.index("--tokenizer-path") + 1] == str(tmp_path)
    assert "--quantization" not in argv  # a bf16 row is not quantised online


def test_run_selects_one_arm_of_a_key_by_exp_name(tmp_path):
    """run.sh runs one arm at a time: `kvbench run --exp-name` as `kvbench launch` has it."""
    def emit(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kvbench", "run", str(RECIPE), "--config-keys",
             "qwen3.5-bf16-h200-sglang-agentic-mtp", "--emit", "github-matrix", "--load-format",
             "dummy", "--model-path", str(tmp_path), *extra],
            capture_output=True, text=True, timeout=120)

    res = emit("--exp-name", "qwen3.5_tp1_conc8_kvnone_spec-mtp")
    assert res.returncode == 0, res.stderr
    assert [j["exp-name"] for j in json.loads(res.stdout)["include"]] == [
        "qwen3.5_tp1_conc8_kvnone_spec-mtp"]
    bad = emit("--exp-name", "qwen3.5_tp1_conc9_kvnone_spec-mtp")
    assert bad.returncode == 2 and "--exp-name qwen3.5_tp1_conc9_kvnone_spec-mtp: not in the " \
        "selection" in bad.stderr and "Traceback" not in bad.stderr
