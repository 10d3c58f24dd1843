"""The embedded engine's replay time forecast in its own clock (sweep/forecast.py): the same
requests `kvbench simulate` runs for the same setup, with the job's planned tiers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from kvbench.matrix import select_jobs
from kvbench.matrix.generate import selection_runners
from kvbench.matrix.selection import Selection
from kvbench.sweep.forecast import engine_seconds
from kvbench.sweep.options import RunOptions
from kvbench.sweep.quickstart import RECIPE, quickstart_options


@pytest.fixture(scope="module")
def quickstart_jobs():
    selection = Selection(config_files=(RECIPE,), runner_config=RECIPE.parent / "runners.yaml")
    return select_jobs(selection), selection_runners(selection)


def test_each_quickstart_job_is_forecast(quickstart_jobs):
    jobs, runners = quickstart_jobs
    options = quickstart_options()
    seconds = {(j.conc, j.kv_offloading): engine_seconds(j, options, runners) for j in jobs}
    assert len(seconds) == 6 and all(s and s > 0 for s in seconds.values())
    assert max(seconds, key=seconds.get) == (12, "none")
    # the host tier at least halves each replay past conc 3: the resident arm recomputes what
    # it evicted
    for conc in (6, 12):
        assert seconds[(conc, "none")] > 2 * seconds[(conc, "dram")], seconds


def test_the_forecast_is_what_kvbench_simulate_runs(quickstart_jobs):
    jobs, runners = quickstart_jobs
    job = next(j for j in jobs if j.conc == 6 and j.kv_offloading == "none")
    options = quickstart_options()
    from kvbench.plan import plan_job

    plan = plan_job(job, runners)
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "simulate",
         *(a for t in options.trace_paths() for a in ("--trace", str(t))),
         "--model", "qwen3-32b", "--precision", "fp8", "--hardware", plan.hardware,
         "--gpu-tokens", str(plan.gpu_kv_tokens), "--concurrency", "6",
         "--max-running-requests", "12", "--max-requests", str(options.max_requests),
         "--order", options.order, "--seed", "0",
         "--think-time-scale", "0", "--max-tokens-cap", str(options.max_tokens_cap),
         "--format", "json"], capture_output=True, text=True, cwd=REPO, timeout=120,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert engine_seconds(job, options, runners) == pytest.approx(
        json.loads(out.stdout)["duration_s"], rel=1e-9)


def test_a_synthetic_workload_is_forecast_on_the_replays_own_draw(quickstart_jobs):
    from kvbench.workload import SyntheticSpec, generate_sessions

    jobs, runners = quickstart_jobs
    synthetic = RunOptions(max_requests=5, seed=3)  # the replay draws these sessions itself
    forecast = engine_seconds(jobs[0], synthetic, runners)
    assert forecast is not None and forecast > 0
    drawn = generate_sessions(SyntheticSpec(seed=3))
    assert engine_seconds(jobs[0], synthetic, runners, drawn) == forecast


def test_the_job_and_the_forecast_take_one_workload_from_the_options():
    """`RunOptions.replay_workload` is the one mapping from the options to the replay's
    requests: the row's duration where no bound is given, a validity profile's settings."""
    assert RunOptions().replay_workload(4, 600.0)["duration_s"] == 600.0
    assert RunOptions(max_requests=20).replay_workload(4, 600.0)["duration_s"] is None
    assert RunOptions(duration_s=50).replay_workload(4, 600.0)["duration_s"] == 50
    assert RunOptions().replay_workload(4, 0.0)["duration_s"] is None
    # AgentX: each lane's first tree at t* in 25-75 % of its trace, then 10 one-token warm-up
    # requests per lane, seed 42; an explicit duration wins over the profile's 3,600 s
    profiled = RunOptions(profile="agentx", duration_s=50).replay_workload(4, 600.0)
    assert profiled["start"] == "sampled" and profiled["start_ratio"] == (0.25, 0.75)
    assert profiled["fresh_server"] is True and profiled["profile"] == "agentx-v1"
    assert profiled["duration_s"] == 50 and profiled["warmup_per_lane"] == 10
    assert profiled["seed"] == 42 and profiled["think_time_cap_s"] is None
    assert RunOptions(profile="agentx", seed=7).replay_workload(4, 600.0)["seed"] == 7
    assert RunOptions(profile="agentx").replay_workload(4, 600.0)["duration_s"] == 600.0


def test_the_forecast_takes_the_profile_the_job_will_run(quickstart_jobs):
    """The pace's forecast resolves the row's profile as the job's spec does: the embedded
    engine's rows keep kvbench's own replay by default; under --profile agentx the forecast
    sends the AgentX warm-up the job will send."""
    jobs, runners = quickstart_jobs
    job = next(j for j in jobs if j.conc == 3 and j.kv_offloading == "none")
    options = quickstart_options()
    plain = engine_seconds(job, options, runners)
    assert plain == engine_seconds(job, options.model_copy(update={"profile": "none"}),
                                   runners)
    agentx = engine_seconds(job, options.model_copy(update={"profile": "agentx"}), runners)
    assert agentx is not None and agentx != plain
