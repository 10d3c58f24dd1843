"""A recipe row as capacity's target: the host axis in the size the row configures, and
`--gpu-tokens` replacing the planner's device pool in every tier.

The row is the real GPU recipe of issue 12 (benchmarks/gpu/vllm/recipe.yaml, native-offload
arm): Qwen3-8B bf16 on one H200, vLLM 0.26, `size-gb-per-rank: 24`. Hand arithmetic:
- KV per token: 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 B = 147,456 B; a 16-token block
  2,359,296 B.
- 24 GB per rank is `--kv-offloading-size 22.35` (GiB, two decimals): 22.35 x 2^30 =
  23,998,129,766 B = 23.998 GB configured -> 10,171 blocks = 162,736 host KV tokens. vLLM 0.26
  pins that as 36 tensors of 10,171 x 65,536 B = 0.667 GB, each rounded up to 1 GiB: 36 GiB =
  38.65 GB of pinned memory, which is not the size on the grid.
- 12 GB is 11.17 GiB = 11,993,589,432 B -> 5,083 blocks = 81,328 tokens.
- The planner's device pool: 141 GB x 0.9 - 16.4 GB of weights - the activation reserve ->
  720,384 tokens (its arithmetic line); run.sh caps the real server at 6 GiB of KV =
  2,730 blocks = 43,680 tokens, which only --gpu-tokens can say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.capacity.target import _plan, configured_gb, target_from_job
from kvbench.cli import main
from kvbench.matrix import select_jobs
from kvbench.matrix.selection import Selection
from kvbench.recipe import load_runners

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "vllm"
KEY = "qwen3-8b-bf16-h200-vllm-agentic-native"
ROW = ["--config-files", str(GPU / "recipe.yaml"), "--runner-config", str(GPU / "runners.yaml"),
       "--config-keys", KEY]
PLANNER_GPU_TOKENS = 720_384
CAPPED_GPU_TOKENS = 43_680
HOST_TOKENS = {0.0: 0, 12.0: 81_328, 24.0: 162_736}


@pytest.fixture(scope="module")
def job_and_runners():
    sel = Selection(config_files=(GPU / "recipe.yaml",), runner_config=GPU / "runners.yaml",
                    config_keys=(KEY,))
    jobs = list(select_jobs(sel))
    assert [j.conc for j in jobs] == [4, 6, 12]  # conc 6: the next GPU session's runs
    return jobs[0], load_runners(GPU / "runners.yaml")


def test_host_axis_is_the_configured_size_not_the_pinned_footprint(job_and_runners):
    job, runners = job_and_runners
    plan = _plan(job, job.row, runners)
    [pool] = plan.host_pools
    assert pool.bytes_per_rank == 36 * 2**30  # 38.65 GB pinned
    assert configured_gb(plan) == pytest.approx(23.998_129_766, abs=1e-9)
    target = target_from_job(job, runners)
    assert target.budget_gb == 24.0  # was 38 (the pinned bytes, whole GB)
    assert target.describe["host-gb-per-rank-max"] == 24.0
    assert target.engine_name == "vllm"
    for gb, tokens in HOST_TOKENS.items():
        assert target.tier(gb).host_kv_tokens == tokens
    assert target.tier(24.0).engine_args == ["--kv-offloading-backend", "native",
                                             "--kv-offloading-size", "22.35"]
    assert target.tier(12.0).engine_args[-1] == "11.17"


def test_without_gpu_tokens_every_tier_has_the_planners_device_pool(job_and_runners):
    target = target_from_job(*job_and_runners)
    assert (target.describe["gpu-kv-tokens"], target.describe["gpu-kv-tokens-from"]) == (
        PLANNER_GPU_TOKENS, "planner")
    for gb in HOST_TOKENS:
        tier = target.tier(gb)
        assert tier.gpu_kv_tokens == tier.plan["gpu-kv-tokens"] == PLANNER_GPU_TOKENS
        assert not any("--gpu-tokens" in line for line in tier.plan["arithmetic"])


def test_gpu_tokens_replace_the_device_pool_in_every_tier_and_plan_json(job_and_runners):
    target = target_from_job(*job_and_runners, gpu_tokens=CAPPED_GPU_TOKENS)
    assert (target.describe["gpu-kv-tokens"], target.describe["gpu-kv-tokens-from"]) == (
        CAPPED_GPU_TOKENS, "--gpu-tokens")
    for gb, host in HOST_TOKENS.items():
        tier = target.tier(gb)
        assert (tier.gpu_kv_tokens, tier.host_kv_tokens) == (CAPPED_GPU_TOKENS, host)
        assert tier.plan["gpu-kv-tokens"] == CAPPED_GPU_TOKENS
        assert tier.plan["host-kv-tokens"] == host
        assert tier.plan["arithmetic"][-1] == (
            "GPU KV tokens per rank: 43,680 from --gpu-tokens (the planner's HBM estimate "
            "was 720,384)")
    # the row as written (plan --predict's offload arm) gets the same device pool
    planned = target.planned_tier()
    assert (planned.gpu_kv_tokens, planned.plan["gpu-kv-tokens"]) == (CAPPED_GPU_TOKENS,) * 2


def test_capacity_cli_predicts_on_the_capped_pool_up_to_24_gb(tmp_path, capsys):
    main(["capacity", *ROW, "--gpu-tokens", str(CAPPED_GPU_TOKENS), "--bounds", "once",
          "--synthetic-sessions", "4",
          "--synthetic-scale", "0.1", "--points", "2", "--format", "json",
          "--output", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((tmp_path / "capacity.json").read_text())
    assert doc["target"]["host-gb-per-rank-max"] == 24.0
    assert doc["target"]["gpu-kv-tokens-from"] == "--gpu-tokens"
    points = {p["host_gb"]: (p["gpu_kv_tokens"], p["host_kv_tokens"]) for p in doc["predicted"]}
    assert points == {gb: (CAPPED_GPU_TOKENS, host) for gb, host in HOST_TOKENS.items()}


def test_gpu_tokens_below_one_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["capacity", *ROW, "--gpu-tokens", "0", "--synthetic-sessions", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--gpu-tokens must be >= 1, got 0" in err and "Traceback" not in err
