"""The vllm engine profile against the committed real vLLM 0.26 H200 runs
(benchmarks/results/h200/vllm): its overheads are what the probe fit gives (never the runs), and
on the runs' own workload bounds, per (arm, concurrency) against the mean of the repeats, it
meets these of issue 16's targets: hit rate per tier within 5 points, ITL p50 within 5%, input
tok/s within 15%, the offload / resident output tok/s ratio within 10%, TTFT p50 within 15% in
every resident job, at conc 12 and in the native arm at conc 4. Not met (docs/performance.md,
"What an unqueued host hit costs"): TTFT p50 in the simple arm at conc 4 (-18%) and at conc 6
(-15.1%), the offload / resident TTFT ratio at conc 4 and 6 (-13..-19%), and TTFT p90 at conc 6
(-22%), held to the bounds below. An unqueued host hit still takes ~70 ms less here than on the
real server, a cost not found in vLLM's source."""

from __future__ import annotations

import importlib.util
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from kvbench.sim.engine_profile import load_engine_profile

REPO = Path(__file__).resolve().parents[2]
VLLM = REPO / "benchmarks" / "results" / "h200" / "vllm"
GPU_SCRIPTS = REPO / "benchmarks" / "gpu"


def _script(path: Path):
    spec = importlib.util.spec_from_file_location(f"gpu_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_vllm_overheads_are_the_probe_fit() -> None:
    profile = load_engine_profile("vllm")
    fit = _script(GPU_SCRIPTS / "fit_engine_profile.py").fit(
        json.loads((VLLM / "calls" / "probe" / "probe.json").read_text()), "Qwen/Qwen3-8B",
        "h200-measured", "vllm", (512, 4096), 32000, profile.prompt_token_overhead_s.value)
    for key, value in fit.items():
        assert getattr(profile, key).value == pytest.approx(value, abs=5e-4), key


@pytest.fixture(scope="module")
def validation() -> list[dict]:
    v = _script(GPU_SCRIPTS / "vllm" / "validate_sim.py")
    from kvbench.workload import load_trace

    sessions = load_trace([v.HERE / "traces"])
    rows, sims = [], {}
    for run in sorted(p for p in (VLLM / "runs").iterdir() if (p / "result.json").is_file()):
        real = v._real(run)
        key = (real["conc"], real["host_tokens"])
        if key not in sims:  # the simulation is deterministic: one per setting
            sims[key] = v._simulated(sessions, real["conc"], real["host_tokens"],
                                     "h200-measured")
        rows.append((run.name, real, sims[key]))
    return rows


def _groups(validation) -> dict[tuple[int, str], tuple[dict, dict]]:
    """(conc, arm) -> (the mean of the real repeats per metric, the simulation)."""
    by: dict[tuple[int, str], list] = defaultdict(list)
    for _, real, sim in validation:
        by[(real["conc"], real["arm"])].append((real, sim))
    keys = ("hit_device", "hit_host", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms",
            "input_tok_s", "output_tok_s")
    return {k: ({m: statistics.fmean(r[m] for r, _ in runs) for m in keys}, runs[0][1])
            for k, runs in by.items()}


# (conc, arm) -> TTFT p50 bound against the mean of the repeats, where the 15% target is not met
TTFT_P50_MISSED = {(4, "vllm-simple"): 0.20, (6, "vllm-simple"): 0.17}
# (conc) -> offload / resident TTFT p50 ratio bound, where the 10% target is not met
TTFT_RATIO_MISSED = {4: 0.18, 6: 0.21}


def test_vllm_profile_meets_the_targets_per_arm_and_concurrency(validation) -> None:
    groups = _groups(validation)
    assert set(groups) >= {(c, a) for c in (4, 6, 12)
                           for a in ("resident", "vllm-native", "vllm-simple")}, set(groups)
    for (conc, arm), (real, sim) in groups.items():
        name = (conc, arm)
        for tier in ("hit_device", "hit_host"):
            assert abs(sim[tier] - real[tier]) <= 0.05, (name, tier, real[tier], sim[tier])
        # ITL as both measure it, the gap before each token (once compared with TPOT: +47%)
        assert sim["itl_p50_ms"] == pytest.approx(real["itl_p50_ms"], rel=0.05), name
        assert sim["input_tok_s"] == pytest.approx(real["input_tok_s"], rel=0.15), name
        bound = TTFT_P50_MISSED.get(name, 0.15)
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=bound), name
        # the tail: within 10% but at conc 6, where it is 22% low (see the module doc)
        p90 = 0.25 if conc == 6 and arm != "resident" else 0.10
        assert sim["ttft_p90_ms"] == pytest.approx(real["ttft_p90_ms"], rel=p90), name
        if arm == "resident":
            continue
        base_real, base_sim = groups[(conc, "resident")]
        for metric, bound in (("output_tok_s", 0.10),
                              ("ttft_p50_ms", TTFT_RATIO_MISSED.get(conc, 0.10))):
            measured = real[metric] / base_real[metric]
            predicted = sim[metric] / base_sim[metric]
            assert predicted == pytest.approx(measured, rel=bound), (name, metric)


def test_vllm_profile_holds_per_run(validation) -> None:
    """Each run alone, where the bounds hold run by run: the hits, ITL and input tok/s."""
    for name, real, sim in validation:
        for tier in ("hit_device", "hit_host"):
            assert abs(sim[tier] - real[tier]) <= 0.05, (name, tier, real[tier], sim[tier])
        assert sim["itl_p50_ms"] == pytest.approx(real["itl_p50_ms"], rel=0.05), name
        assert sim["input_tok_s"] == pytest.approx(real["input_tok_s"], rel=0.15), name
