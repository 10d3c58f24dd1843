"""Every agentic row of the real InferenceX configs gets a plan or a clear refusal."""

from __future__ import annotations

from collections import Counter

from fixtures.jobs import budget_plan

from kvbench.matrix import Selection, select_jobs
from kvbench.recipe import load_runners
from kvbench.units import GB


def test_every_agentic_row_plans(shared_data):
    d = shared_data / "inferencex"
    selection = Selection(config_files=(d / "amd-master.yaml", d / "nvidia-master.yaml"),
                          runner_config=d / "runners.yaml")
    jobs = select_jobs(selection)
    assert len(jobs) == 746  # reference/inferencex.md 2.2
    runners = load_runners(d / "runners.yaml")
    plans = [budget_plan(job, runners) for job in jobs]
    backends = Counter(p.backend or "none" for p in plans)
    assert backends == {"none": 433, "hicache": 168, "vllm-simple": 52, "mooncake": 50,
                        "native": 34, "lmcache": 9}
    for job, plan in zip(jobs, plans, strict=True):
        assert plan.exp_name == job.exp_name
        assert plan.within_budget or plan.errors, plan.exp_name
        if plan.backend:
            assert plan.projected_host_bytes <= job.total_cpu_dram_gb * GB or plan.errors
            assert plan.engine_args or plan.engine_env or plan.engine_config
    # the real configs carry no explicit sizes, so every derived plan fits
    assert all(p.within_budget for p in plans)
