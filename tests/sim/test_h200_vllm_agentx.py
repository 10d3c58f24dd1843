"""The vllm profile on real vLLM 0.26 runs under the AgentX profile (session 14's five conc-4
offload runs, benchmarks/results/h200/vllm/runs-agentx-v1), out of sample: nothing was fitted
on them. The simulator replays them with the profile's settings (the harness's warm-up,
sampled starts, seed 42) and must send the same requests; throughput and the all-tier hit rate
hold; TTFT p50 is the measured miss (docs/performance.md, "Out of sample: the AgentX workload
on real vLLM", and "admit_full_prompt" after it), bounded here so that a model change that
widens it fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
RUNS = GPU.parents[0] / "results" / "h200" / "vllm" / "runs-agentx-v1"


@pytest.fixture(scope="module")
def rows():
    spec = importlib.util.spec_from_file_location("validate_sim", GPU / "validate_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.evaluate(RUNS)


def test_the_agentx_settings_are_replayed(rows):
    module, got = rows
    real = {"conc": 4, "duration_s": 50.0, "profile": "agentx-v1"}
    b = module.bounds_of(real)
    assert (b.start, b.start_ratio, b.seed, b.warmup_per_lane) == ("sampled", (0.25, 0.75),
                                                                   42, 10)
    assert b.think_time_cap_s is None and b.tree_markers
    assert module.bounds_of({"conc": 4, "duration_s": 50.0, "profile": None}).start == "beginning"
    assert len(got) == 5 and {r["real"]["profile"] for r in got} == {"agentx-v1"}


def test_the_simulator_sends_the_same_requests_and_holds_throughput(rows):
    for r in rows[1]:
        real, sim = r["real"], r["sim"]
        assert r["same_requests"] >= 18 and r["union_requests"] <= 19, r["job"]
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=0.06), r["job"]
        total_real = real["hit_device"] + real["hit_host"]
        total_sim = sim["hit_device"] + sim["hit_host"]
        # the engine's counters over the phase (their baseline up to a scrape early)
        assert abs(total_sim - total_real) < 0.08, r["job"]


def test_ttft_p50_is_the_measured_miss(rows):
    """5-19% low, inside every run's 95% bootstrap interval of its p50, since the profile's
    admit_full_prompt (23-34% low and outside all five intervals before: these runs were out
    of sample for that change, which was decided on the engine's source, its preemption
    counter and the fit halves of the other runs); the device tier 1-10 points high: the
    per-host-hit shortfall, on requests that are nearly all host hits under the AgentX
    starts."""
    for r in rows[1]:
        real, sim = r["real"], r["sim"]
        assert -0.20 < sim["ttft_p50_ms"] / real["ttft_p50_ms"] - 1 < -0.04, r["job"]
        assert r["sim_ttft_p50_in_interval"], r["job"]
        assert 0 <= sim["hit_device"] - real["hit_device"] < 0.12, r["job"]
