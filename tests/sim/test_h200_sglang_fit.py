"""The SGLang 0.5.17 H200 profile (benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml)
against the committed measurements: its numbers are the probe fit, and the run it was never fitted
to (resident, conc 6) is predicted within bounds stated here with the measured values."""

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


def test_the_resident_conc6_run_it_was_not_fitted_to():
    from kvbench.sim.engine import EngineConfig
    from kvbench.sim.simulate import SimSetup, run_sessions
    from kvbench.sim.sizing import resolve_costs
    from kvbench.workload import load_trace
    from kvbench.workload.bounds import WorkloadBounds

    real = json.loads((SGLANG / "runs" / "resident-c6" / "result.json").read_text())
    lat, tput = real["request_metrics"]["latency"], real["request_metrics"]["throughput"]
    profile = load_engine_profile(str(PROFILE))
    costs = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16", engine=profile)
    # server.log: max_total_num_tokens=43648, chunked_prefill_size=8192; run.sh's bounds
    sim = run_sessions(load_trace([REPO / "benchmarks" / "gpu" / "vllm" / "traces"]), costs,
                       SimSetup(43_648, 0, engine=EngineConfig(chunked_prefill_tokens=8192)),
                       WorkloadBounds(concurrency=6, duration_s=50.0, max_tokens_cap=256))
    # measured: TTFT p50 10,655 ms, p90 13,921 ms, input 6,821 tok/s, output 69.6 tok/s, no hit
    assert sim["ttft_ms"]["p50"] == pytest.approx(lat["ttft_ms"]["p50"], rel=0.16)
    assert sim["ttft_ms"]["p90"] == pytest.approx(lat["ttft_ms"]["p90"], rel=0.10)
    assert sim["throughput"]["input_tok_s"] == pytest.approx(tput["input_tok_s"], rel=0.18)
    assert sim["throughput"]["output_tok_s"] == pytest.approx(tput["output_tok_s"], rel=0.18)
    assert real["request_metrics"]["cache"]["hit_rate"] == 0.0 == sim["hit_rate"]["device"]
