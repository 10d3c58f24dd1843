"""benchmarks/gpu/mla/recipe.yaml (issue 37 item 6: the scaled DeepSeek-V3 on SGLang 0.5.17):
every row plans and renders, with the flags the planner's settings give DeepSeek rows on SGLang
and run.sh's engine arguments, as cpu_check.txt fed them to SGLang 0.5.17's ServerArgs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job
from kvbench.recipe import load_runners

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "gpu" / "mla"
# run.sh's COMMON and CAPS
RUN_ARGS = ["--attention-backend=triton", "--sampling-backend=pytorch", "--disable-cuda-graph",
            "--max-total-tokens=43680", "--max-running-requests=16"]


def _launches(*engine_args: str) -> dict[str, dict]:
    res = subprocess.run(
        [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
         "--config-files", str(HERE / "recipe.yaml"), "--runner-config",
         str(HERE / "runners.yaml"), *(f"--engine-arg={a}" for a in engine_args)],
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return {j["exp-name"]: j for j in json.loads(res.stdout)}


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_every_arm_renders_the_deepseek_settings_and_run_sh_flags():
    jobs = _launches(*RUN_ARGS)
    assert sorted(jobs) == sorted(
        f"dsv3_tp1_conc{c}_{arm}{spec}" for c in (4, 8) for arm in ("kvnone", "kvdram-hicache")
        for spec in ("_spec-mtp", ""))
    for name, job in jobs.items():
        argv = job["argv"]
        assert (job["served-model-name"], _flag(argv, "--page-size"),
                _flag(argv, "--kv-cache-dtype"), _flag(argv, "--attention-backend"),
                _flag(argv, "--max-total-tokens")) == (
            "kvbench/deepseek-v3-scaled", "64", "bfloat16", "triton", "43680"), name
        mtp = name.endswith("_spec-mtp")
        assert (_flag(argv, "--speculative-algorithm"), _flag(argv, "--speculative-num-steps"),
                _flag(argv, "--speculative-eagle-topk"),
                _flag(argv, "--speculative-num-draft-tokens")) == (
            ("EAGLE", "3", "1", "4") if mtp else (None,) * 4), name
        hicache = "kvdram-hicache" in name
        assert ("--enable-hierarchical-cache" in argv) is hicache, name
        if hicache:
            assert (_flag(argv, "--hicache-size"), _flag(argv, "--hicache-io-backend"),
                    _flag(argv, "--hicache-mem-layout"),
                    _flag(argv, "--hicache-write-policy")) == (
                "32", "kernel", "page_first", "write_through"), name
        assert not [w for w in job["warnings"] if "do not fit" in w], name


def test_uncapped_the_plan_is_the_pools_the_h200_allocated():
    """SGLang 0.5.17 gives DeepSeek-V3's MTP the model's own path as the draft path
    (arg_groups/speculative_hook.py:560-580), so the NextN layer counts in the per-token cell
    size (pool_configurator.py:147-163) and target and draft pools share the fraction. The
    probe on the H200 (benchmarks/results/h200/mla/probe, session 11) allocated 15,461,376
    tokens for each; the plan of the same launch is within 0.5%, and neither arm is warned."""
    jobs = _launches("--attention-backend=triton", "--sampling-backend=pytorch",
                     "--disable-cuda-graph")
    log = (REPO / "benchmarks/results/h200/mla/probe/server/server.log").read_text()
    allocated = [int(line.split("#tokens: ")[1].split(",")[0])
                 for line in log.splitlines() if "KV Cache is allocated" in line]
    assert allocated == [15_461_376, 15_461_376]  # target, then draft
    (job,) = [j for j in select_jobs(Selection(config_files=(HERE / "recipe.yaml",)))
              if j.exp_name == "dsv3_tp1_conc8_kvdram-hicache_spec-mtp"]
    plan = plan_job(job, load_runners(HERE / "runners.yaml"), engine_args=[
        "--attention-backend=triton", "--sampling-backend=pytorch", "--disable-cuda-graph"])
    assert abs(plan.to_json()["gpu-kv-tokens"] / allocated[0] - 1) < 0.005
    for name in ("dsv3_tp1_conc8_kvdram-hicache_spec-mtp", "dsv3_tp1_conc8_kvnone_spec-mtp"):
        assert not [w for w in jobs[name]["warnings"] if "do not fit" in w], name
