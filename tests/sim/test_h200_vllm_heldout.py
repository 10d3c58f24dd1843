"""The vllm profile on two halves of the real vLLM 0.26 H200 runs' sessions (issue 26):
benchmarks/gpu/heldout.py splits the 42 sessions by a fixed hash into 21 fit and 21
held-out, simulates each run whole and scores each half. The profile's overheads are the
probe fit (test_h200_vllm_fit.py); one number, load_stall_s, was fitted on the fit half of
these runs (benchmarks/gpu/vllm/load_stall.py, issue 36 item 2), so the held-out half is out
of sample for every number. Targets (issue 12): TTFT p50 and tok/s within 15%, hit rate
within 5 points, offload / resident ratios within 10%. Where a half misses, the bound below
is the measured miss (docs/performance.md, "Held-out sessions")."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from kvbench.files import iter_jsonl

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _heldout():
    spec = importlib.util.spec_from_file_location("heldout", HERE / "heldout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def heldout():
    return _heldout()


@pytest.fixture(scope="module")
def rows(heldout):
    return heldout.evaluate()


def test_the_split_is_a_fixed_hash_of_the_session_id(heldout) -> None:
    names = sorted(p.name.removesuffix(".json.gz") for p in (HERE / "vllm" / "traces").glob(
        "*.json.gz"))
    halves = [heldout.half_of(n) for n in names]
    assert halves.count("fit") == halves.count("held-out") == 21
    assert heldout.half_of("trace_0011") == heldout.half_of("trace_0011")
    assert {heldout.half_of(n) for n in ("trace_0011", "trace_0019", "trace_0036")} <= {
        "fit", "held-out"}


# (half, conc, arm) -> TTFT p50 bound where 15% is missed; (half, conc) -> offload / resident
# TTFT p50 ratio bound where 10% is missed
TTFT_P50_MISSED: dict[tuple[str, int, str], float] = {}
# simple: 0.44 real (its repeats: 0.37, 0.50) -> 0.50; the statistic, not the connector:
# test_the_simple_arms_held_out_miss_is_its_median_not_its_connector
RATIO_MISSED = {("held-out", 4): 0.15}


def test_both_halves_against_the_targets(rows) -> None:
    assert {(r["half"], r["conc"], r["arm"]) for r in rows} == {
        (h, c, a) for h in ("fit", "held-out") for c in (4, 6, 12)
        for a in ("resident", "vllm-native", "vllm-simple")}
    for r in rows:
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        assert abs(sim["hit_total"] - real["hit_total"]) <= 0.05, name
        for k in ("input_tok_s", "output_tok_s"):
            assert sim[k] == pytest.approx(real[k], rel=0.15), (name, k)
        bound = TTFT_P50_MISSED.get(name, 0.15)
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=bound), name
        if "ratio" in r:
            out, ttft = r["ratio"]["output_tok_s"], r["ratio"]["ttft_p50_ms"]
            assert out["sim"] == pytest.approx(out["real"], rel=0.10), name
            bound = RATIO_MISSED.get((r["half"], r["conc"]), 0.10)
            assert ttft["sim"] == pytest.approx(ttft["real"], rel=bound), name


def test_the_shipped_load_stall_is_the_fit_half_fit() -> None:
    """engines/vllm.yaml's load_stall_s is what benchmarks/gpu/vllm/load_stall.py fits on the
    fit half's requests of the offload runs (its grid, every run simulated at each value),
    and the fit reads the fit half only: scrambling the held-out half changes nothing."""
    from kvbench.sim.engine_profile import load_engine_profile

    spec = importlib.util.spec_from_file_location("load_stall", HERE / "vllm" / "load_stall.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    errors = module.per_request_log_errors([0.0, 0.04, 0.045, 0.05, 0.06])
    assert module.fitted(errors) == load_engine_profile("vllm").load_stall_s.value == 0.05
    scrambled = {v: {"fit": h["fit"], "held-out": [9.0]} for v, h in errors.items()}
    assert module.fitted(scrambled) == 0.05


def test_the_simple_arms_held_out_miss_is_its_median_not_its_connector() -> None:
    """benchmarks/gpu/vllm/connectors.py on the conc-4 runs: the real simple arm's held-out
    TTFT p50 (521 ms, 18% below native's 637) rests on one run whose 22 requests put the
    median between 294 and 595 ms (the gap between unqueued host hits and queued requests);
    the same requests in the simple and native runs differ by a median 1.4% held-out, 0.3%
    fit, against native repeats' own 11-21% per request; and the simulator's per-request bias
    is the same for both connectors on the fit half, so the fit half asks for no connector
    term (the one consistent difference, unqueued hits 8-11 ms sooner in simple, is 4-5% of
    those hits and moves no p50): fitted on the simple arm alone, load_stall_s is 55 ms, not
    below the shipped 50 (~1.5 s)."""
    from kvbench.sim.engine_profile import load_engine_profile

    spec = importlib.util.spec_from_file_location("connectors", HERE / "vllm" / "connectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    e = module.evidence()
    simple = [r for r in e["runs"] if r["arm"] == "vllm-simple" and r["half"] == "held-out"]
    assert max(hi - lo for lo, hi in (r["middle_ms"] for r in simple)) > 250
    for half in ("fit", "held-out"):
        assert abs(e["pairs"][half]) < 0.03 < e["repeats"][half] / 3, half
        assert -15 < statistics.median(e["fast_ms"][half]) < -5, half
    bias = {k: statistics.median(x) for k, x in e["sim_bias"].items()}
    assert abs(bias[("vllm-simple", "fit")] - bias[("vllm-native", "fit")]) < 0.02
    # load_stall.py's rule on the simple arm's fit-half requests alone: no shorter stall
    assert e["simple_stall_fit"] >= load_engine_profile("vllm").load_stall_s.value == 0.05


# Session 15's conc-4 runs (benchmarks/results/h200/vllm/runs-s15): 4-7 repeats per arm of
# the same traces as kvbench reads them now (the gaps between turns from the stream's times,
# where the runs above slept the recorded think_time: 14 requests in 50 s, not 36-38).
# Nothing was fitted on them.
S15 = HERE.parent / "results" / "h200" / "vllm" / "runs-s15"


def test_the_second_workload_meets_the_targets_on_whole_runs_and_the_held_out_half() -> None:
    spec = importlib.util.spec_from_file_location("validate_sim", HERE / "validate_sim.py")
    v = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v)
    runs = v.evaluate(S15)
    assert len(runs) == 11
    for r in runs:
        real, sim = r["real"], r["sim"]
        assert r["same_requests"] == r["union_requests"] == 14, r["job"]
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.10), r["job"]
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=0.02), r["job"]
        for tier in ("hit_device", "hit_host"):
            assert abs(sim[tier] - real[tier]) <= 0.01, (r["job"], tier)
    rows = _heldout().evaluate(S15)
    for r in rows:
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        assert sim["requests"] == real["requests"], name
        assert abs(sim["hit_total"] - real["hit_total"]) <= 0.01, name
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=0.02), name
        if r["half"] == "held-out":
            assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.15), name
            for k, x in r.get("ratio", {}).items():
                assert x["sim"] == pytest.approx(x["real"], rel=0.10), (name, k)


def test_the_second_workloads_fit_half_miss_is_one_arrival_race() -> None:
    """The fit half misses (resident TTFT p50 +39%, offload / resident ratios -25%): its nine
    requests' median falls where two requests race. In every real run trace_0011's second
    turn (fit half) is sent 0.10-0.26 s before trace_0121's first (held-out) and is served
    first; the simulator ends trace_0011's first turn about 0.3 s late and sends the two in
    the other order, so trace_0011's turn waits behind the other's 18K-token prefill in the
    simulation only. Without that one request the fit half's TTFT p50 is within 9% in every
    run (-9% to +2%)."""
    h = _heldout()
    v = h._validate_module()
    a, b = ("trace_0011", 1), ("trace_0121", 0)
    assert (h.half_of(a[0]), h.half_of(b[0])) == ("fit", "held-out")
    for run in sorted(p for p in S15.iterdir() if (p / "result.json").is_file()):
        real = v._real(run)
        done: list = []
        sim = v._simulated(v.sessions_for(real), real, "h200-measured", None, done)
        arrival = {(r.meta["session_id"], r.meta["turn"]): r.arrival_s for r in done}
        recs = {(x["session_id"], x["turn"]): x["t_send_ns"]
                for x in iter_jsonl(run / "records.jsonl")}
        assert 0.05e9 < recs[b] - recs[a] < 0.3e9, run.name
        assert arrival[a] > arrival[b], run.name
        t_real, t_sim = real["ttft_by_request"], sim["ttft_by_request"]
        assert t_sim[a] > 1.5 * t_real[a] and t_sim[b] < 0.8 * t_real[b], run.name
        fit = [k for k in t_real if h.half_of(k[0]) == "fit" and k != a]
        p50_real = statistics.median(t_real[k] for k in fit)
        p50_sim = statistics.median(t_sim[k] for k in fit)
        assert p50_sim == pytest.approx(p50_real, rel=0.10), run.name
