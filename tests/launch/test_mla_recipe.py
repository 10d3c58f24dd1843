"""benchmarks/gpu/mla/recipe.yaml (issue 37 item 6: the scaled DeepSeek-V3 on SGLang 0.5.17):
every row plans and renders, with the flags the planner's settings give DeepSeek rows on SGLang
and run.sh's engine arguments, as cpu_check.txt fed them to SGLang 0.5.17's ServerArgs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_uncapped_the_path_less_draft_pool_is_the_plans_warning_where_it_cannot_fit():
    """Up to 0.5.17 SGLang sizes a path-less NextN draft's pool outside the memory fraction
    with the target's token count (plan/gpu.py): uncapped, the resident MTP arm's 0.85 leaves
    less than its one-layer latent pool needs; the HiCache arm's 0.82 (the probe) leaves enough."""
    jobs = _launches("--attention-backend=triton", "--disable-cuda-graph")
    (note,) = [w for w in jobs["dsv3_tp1_conc8_kvnone_spec-mtp"]["warnings"] if "do not fit" in w]
    assert "path-less MTP draft's KV pool" in note and "0.85" in note
    assert not [w for w in jobs["dsv3_tp1_conc8_kvdram-hicache_spec-mtp"]["warnings"]
                if "do not fit" in w]
