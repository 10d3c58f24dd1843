"""Host memory the pools may not take: a default headroom per rank, configurable; and a
runners.yaml that claims more DRAM than the hardware profile installs is refused."""

from __future__ import annotations

import pytest
from fixtures.jobs import budget_plan, make_job

from kvbench.recipe.runners import RunnerHardware, Runners
from kvbench.units import GB


def _size(plan) -> int:
    return int(plan.engine_args[plan.engine_args.index("--hicache-size") + 1])


def test_default_headroom_is_one_gb_per_rank():
    plan = budget_plan(make_job())  # qwen3.5 TP2 on B300, 599 GB
    # (599 - 2 x 1) / 2 = 298.50 GB per rank; per GB of size: kv 1 + mamba 1 + draft 1/15
    # -> 298.50 / 2.0667 = 144.4 -> 144
    assert any("host headroom 2.00 GB" in line and "= 298.50 GB per rank" in line
               for line in plan.arithmetic)
    assert _size(plan) == 144
    assert plan.projected_host_bytes <= 597 * GB


def test_headroom_is_configurable_and_shrinks_the_pools():
    plan = budget_plan(make_job(), host_headroom_gb=100)
    # (599 - 100) / 2 = 249.50 GB per rank / 2.0667 = 120.7 -> 120
    assert _size(plan) == 120
    assert plan.projected_host_bytes <= 499 * GB and plan.within_budget
    with_none = budget_plan(make_job(), host_headroom_gb=0)
    assert _size(with_none) == 144  # 299.50 / 2.0667 = 144.9


def test_negative_headroom_is_refused():
    plan = budget_plan(make_job(), host_headroom_gb=-1)
    assert not plan.within_budget
    assert plan.errors == ["host headroom -1 GB is negative; allowed: >= 0"]


def _runners(mib: int) -> Runners:
    return Runners(labels={"cluster:b300-nv": ["b300-nv_00"]}, hardware={
        "cluster:b300-nv": RunnerHardware.model_validate(
            {"available-cpu-dram-mib": mib, "gpus-per-node": 8})})


def test_runner_dram_above_the_installed_dram_is_refused_unless_trusted():
    # the b300 profile installs 3 TiB = 3,298,534,883,328 B; 4,000,000 MiB = 4,194 GB claims more
    plan = budget_plan(make_job(), _runners(4_000_000))
    assert not plan.within_budget
    assert plan.errors[0].startswith(
        "runners.yaml hardware.cluster:b300-nv.available-cpu-dram-mib 4,000,000 MiB = 4,194 GB "
        "is more than the b300 profile installs (3,299 GB")
    assert plan.errors[0].endswith("pass --trust-runner-dram")
    trusted = budget_plan(make_job(), _runners(4_000_000), trust_runner_dram=True)
    assert trusted.within_budget


@pytest.mark.parametrize("mib", [2_964_436, 3_145_728])  # the real b300-nv entry; exactly 3 TiB
def test_runner_dram_within_the_profile_is_accepted(mib):
    assert budget_plan(make_job(), _runners(mib)).within_budget


def test_plan_cli_takes_the_headroom(shared_data, capsys):
    import json

    from kvbench.cli import main

    d = shared_data / "inferencex"
    main(["plan", "--sizing", "budget", "--config-files", str(d / "nvidia-master.yaml"),
          "--format", "json",
          "--runner-config", str(d / "runners.yaml"), "--host-headroom-gb", "100",
          "--config-keys", "qwen3.5-fp8-b300-sglang-agentic-mtp", "--min-conc", "56"])
    plan = next(p for p in json.loads(capsys.readouterr().out) if p["backend"] == "hicache")
    # the row's 599 GB - 100 GB over 2 ranks = 249.50 GB per rank -> --hicache-size 120
    assert plan["total-cpu-dram-gb"] == 599
    assert plan["engine-args"][plan["engine-args"].index("--hicache-size") + 1] == "120"
