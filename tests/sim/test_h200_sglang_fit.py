"""The SGLang 0.5.17 H200 profile (benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml)
against the committed measurements: its overheads are the probe fit, its decode read rate per
batch the triton kernel's grid arithmetic, and the runs it was never fitted to (resident, HiCache
write_through and write_through_selective at conc 4 and 6) are predicted within the bounds
stated here, each miss with its measured size."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvbench.sim.engine_profile import load_engine_profile

REPO = Path(__file__).resolve().parents[2]
SGLANG = REPO / "benchmarks" / "results" / "h200" / "sglang"
PROFILE = SGLANG / "engine-sglang-h200-triton.yaml"


def _fit_script():
    path = REPO / "benchmarks" / "gpu" / "fit_engine_profile.py"
    spec = importlib.util.spec_from_file_location("gpu_fit_engine_profile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_profile_is_the_probe_fit():
    fit = _fit_script().fit(json.loads((SGLANG / "probe" / "probe.json").read_text()),
                            engine="sglang", fit_prompts=(128, 1024), attention_prompt=32000,
                            decode_point=(32000, 1))
    profile = load_engine_profile(str(PROFILE))
    assert fit["decode_kv_read_efficiency"] == pytest.approx(0.0872, abs=1e-3)
    for key, value in fit.items():
        assert getattr(profile, key).value == pytest.approx(value, rel=0.01, abs=1e-5), key


@pytest.fixture(scope="module")
def validate():
    spec = importlib.util.spec_from_file_location(
        "gpu_validate_sim", REPO / "benchmarks" / "gpu" / "validate_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def validation(validate) -> list[dict]:
    return validate.evaluate(SGLANG / "runs")


# (conc, arm) -> the measured miss where a target is not met (docs/performance.md, "SGLang
# 0.5.17 on the H200: the simulator"): at conc 4 the offload arms' TTFT p50 (3.9 and 4.2 s
# measured, one run each) sits in a gap of the 23 requests' TTFTs, where the simulator's
# median lands at 2.9 s; their p90 is within 10%
TTFT_P50_MISSED = {(4, "write_through"): 0.27, (4, "write_through_selective"): 0.32}
TTFT_RATIO_MISSED = {4: 0.37, 6: 0.12}


def test_every_arm_and_concurrency_against_the_targets(validate, validation) -> None:
    """Resident, HiCache write_through and write_through_selective at conc 4 and 6 (10 runs
    of 11 with the session-4 resident one), against the mean of the repeats: hit rate per
    tier within 5 points, ITL p50 within 5%, tok/s within 7%, TTFT p50 within 15% (but the
    conc-4 offload arms) and p90 within 10%, the offload / resident output tok/s ratio within
    10% and the TTFT p50 ratio within the bounds above."""
    groups = validate.by_arm(validation)
    assert set(groups) == {(c, a) for c in (4, 6)
                           for a in ("resident", "write_through", "write_through_selective")}
    for (conc, arm), (real, sim) in groups.items():
        name = (conc, arm)
        for tier in ("hit_device", "hit_host"):
            assert abs(sim[tier] - real[tier]) <= 0.05, (name, tier, real[tier], sim[tier])
        assert sim["itl_p50_ms"] == pytest.approx(real["itl_p50_ms"], rel=0.05), name
        for metric in ("input_tok_s", "output_tok_s"):
            assert sim[metric] == pytest.approx(real[metric], rel=0.07), (name, metric)
        bound = TTFT_P50_MISSED.get(name, 0.15)
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=bound), name
        assert sim["ttft_p90_ms"] == pytest.approx(real["ttft_p90_ms"], rel=0.10), name
        if arm == "resident":
            continue
        base_real, base_sim = groups[(conc, "resident")]
        for metric, rel in (("output_tok_s", 0.10),
                            ("ttft_p50_ms", TTFT_RATIO_MISSED[conc])):
            measured = real[metric] / base_real[metric]
            assert sim[metric] / base_sim[metric] == pytest.approx(measured, rel=rel), (
                name, metric)


def test_decode_reads_faster_with_the_batch_up_to_the_grid_filling_the_gpu() -> None:
    """The triton decode kernel's grid (64 CTAs per sequence on 132 SMs): at batch 2 a step
    reads the KV of twice the context in about the time one sequence takes, and from 2.06
    sequences on no faster per token; the `vllm` profile reads at one rate at every batch."""
    from kvbench.sim.sizing import resolve_costs

    costs = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16",
                          engine=load_engine_profile(str(PROFILE)))
    one, two, four = (costs.decode_lines(b)[1] for b in (1, 2, 4))
    assert one / two == pytest.approx(2.0) and one / four == pytest.approx(2.06)
    assert costs.decode_step_s(2, 2 * 16_000) < 1.05 * costs.decode_step_s(1, 16_000)
    vllm = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16",
                         engine=load_engine_profile("vllm"))
    assert vllm.decode_lines(1)[1] == vllm.decode_lines(8)[1]


def test_per_request_ttft_holds_in_every_run(validation) -> None:
    """Over the requests both sent, run by run: the simulated TTFT is 0.91-1.07x the measured
    one at the median (so the conc-4 p50 misses above are the percentile of 23 requests, not a
    bias), and within a mean |ln| of 0.25."""
    for row in validation:
        assert 0.90 <= row["ttft_request_ratio_p50"] <= 1.10, row["job"]
        assert row["ttft_request_error"] <= 0.25, row["job"]
        assert row["same_requests"] >= 0.85 * row["union_requests"], row["job"]


def test_the_ttft_p50_misses_against_each_runs_own_noise(validate, validation) -> None:
    """The 95% bootstrap interval of each run's TTFT p50 over its requests: the simulated p50
    lies inside it in 10 of the 11 runs, the conc-4 write_through miss (-26%) included. Only
    write_through_selective at conc 4 (-32%) is a miss its run can tell from noise: the
    simulator predicts both write policies alike, and that run was the slower of the two."""
    outside = {row["job"] for row in validation if not row["sim_ttft_p50_in_interval"]}
    assert outside == {"selective-c4"}
    assert validate.p50_interval([7.0] * 9) == [7.0, 7.0]  # no spread, no interval
    lo, hi = validate.p50_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert 1.0 <= lo < 3.0 < hi <= 5.0
