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
# TTFT p50 ratio bound where 10% is missed. Held-out conc 4 since admit_full_prompt (vLLM
# 0.26's scheduler_reserve_full_isl, engines/vllm.yaml) and load_stall_s refitted to 45 ms:
# the held-out offload p50s (637 and 521 ms real, in the gap between unqueued host hits and
# queued requests) read 430 simulated (575 before), native -32% and simple -17%, ratios -35%
# and -21% (-7% and +14% before); every other cell of both halves meets the targets.
TTFT_P50_MISSED = {("held-out", 4, "vllm-native"): 0.33, ("held-out", 4, "vllm-simple"): 0.18}
RATIO_MISSED = {("held-out", 4): 0.36}


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
    fit half's requests of the offload runs of both workloads (its grid, every run simulated
    at each value), and the fit reads the fit half only: scrambling the held-out half changes
    nothing."""
    from kvbench.sim.engine_profile import load_engine_profile

    spec = importlib.util.spec_from_file_location("load_stall", HERE / "vllm" / "load_stall.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    errors = module.per_request_log_errors([0.0, 0.04, 0.045, 0.05, 0.06])
    assert module.fitted(errors) == load_engine_profile("vllm").load_stall_s.value == 0.045
    scrambled = {v: {"fit": h["fit"], "held-out": [9.0]} for v, h in errors.items()}
    assert module.fitted(scrambled) == 0.045


def test_the_simple_arms_held_out_miss_is_its_median_not_its_connector() -> None:
    """benchmarks/gpu/vllm/connectors.py on the conc-4 runs: the real simple arm's held-out
    TTFT p50 (521 ms, 18% below native's 637) rests on one run whose 22 requests put the
    median between 294 and 595 ms (the gap between unqueued host hits and queued requests);
    the same requests in the simple and native runs differ by a median 1.4% held-out, 0.3%
    fit, against native repeats' own 11-21% per request; and the simulator's per-request bias
    is the same for both connectors on the fit half, so the fit half asks for no connector
    term (the one consistent difference, unqueued hits 8-11 ms sooner in simple, is 4-5% of
    those hits and moves no p50): fitted on the simple arm alone, load_stall_s is one grid
    step (5 ms) from the shipped value (55 against 50 before admit_full_prompt, 40 against 45
    since) (~1.5 s)."""
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
    # load_stall.py's rule on the simple arm's fit-half requests alone: within a grid step
    shipped = load_engine_profile("vllm").load_stall_s.value
    assert abs(e["simple_stall_fit"] - shipped) <= 0.005 + 1e-9


# Session 15's conc-4 runs (benchmarks/results/h200/vllm/runs-s15): 4-7 repeats per arm of
# the same traces as kvbench reads them now (the gaps between turns from the stream's times,
# where the runs above slept the recorded think_time: 14 requests in 50 s, not 36-38).
# Nothing was fitted on them.
S15 = HERE.parent / "results" / "h200" / "vllm" / "runs-s15"


def _whole_runs_of_s15(conc: int, requests: int) -> list[dict]:
    """validate_sim.py's rows of the runs-s15 runs at `conc`, each checked against what both
    concurrencies meet: the same requests sent, TTFT p50 within 10%, output tok/s within 2%,
    device and host hit rates within a point."""
    runs = [r for r in _heldout()._validate_module().evaluate(S15) if r["conc"] == conc]
    for r in runs:
        real, sim = r["real"], r["sim"]
        assert r["same_requests"] == r["union_requests"] == requests, r["job"]
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.10), r["job"]
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=0.02), r["job"]
        for tier in ("hit_device", "hit_host"):
            assert abs(sim[tier] - real[tier]) <= 0.01, (r["job"], tier)
    return runs


def _halves_of_s15(conc: int, tok_s_rel: float) -> list[dict]:
    """heldout.py's rows (half, arm) of the runs-s15 runs at `conc`, each checked against what
    both halves meet: the same request count, hit rate within a point, output tok/s within
    `tok_s_rel`."""
    rows = [r for r in _heldout().evaluate(S15) if r["conc"] == conc]
    for r in rows:
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        assert sim["requests"] == real["requests"], name
        assert abs(sim["hit_total"] - real["hit_total"]) <= 0.01, name
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=tok_s_rel), name
    return rows


def test_the_second_workload_meets_the_targets_on_whole_runs_and_the_held_out_half() -> None:
    assert len(_whole_runs_of_s15(4, 14)) == 11
    for r in _halves_of_s15(4, 0.02):
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        if r["half"] == "held-out":
            assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.15), name
            for k, x in r.get("ratio", {}).items():
                assert x["sim"] == pytest.approx(x["real"], rel=0.10), (name, k)


# The same workload at conc 6 (session 16: one resident and one simple run; the native run and
# second repeats were not taken). Nothing was fitted on them. Measured misses: the whole runs'
# simple / resident TTFT p50 ratio 0.777 real, 0.700 simulated (-10%: simple -4%, resident
# +6%); the held-out half's 0.10 real, 0.09 simulated (-14%): its resident median queues
# (2,952 ms real, 3,051 simulated, +3%) where the simple arm's is an unqueued host hit (298
# and 264 ms, -11%), so a few ms on the small side move the small ratio by 14%.
CONC6_RATIO_MISSED = {"run": 0.11, "held-out": 0.15}


def test_the_second_workload_at_conc6_on_whole_runs_and_the_held_out_half() -> None:
    runs = _whole_runs_of_s15(6, 23)
    assert {r["arm"] for r in runs} == {"resident", "vllm-simple"}
    p50 = {r["arm"]: (r["real"]["ttft_p50_ms"], r["sim"]["ttft_p50_ms"]) for r in runs}
    ratio_real, ratio_sim = (p50["vllm-simple"][i] / p50["resident"][i] for i in (0, 1))
    assert ratio_sim == pytest.approx(ratio_real, rel=CONC6_RATIO_MISSED["run"])
    assert ratio_sim < ratio_real  # the miss's side: offload's gain read 10% larger
    rows = _halves_of_s15(6, 0.03)
    assert {(r["half"], r["arm"]) for r in rows} == {
        (h, a) for h in ("fit", "held-out") for a in ("resident", "vllm-simple")}
    for r in rows:
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.15), name
        for k, x in r.get("ratio", {}).items():
            bound = CONC6_RATIO_MISSED["held-out"] if (r["half"], k) == (
                "held-out", "ttft_p50_ms") else 0.10
            assert x["sim"] == pytest.approx(x["real"], rel=bound), (name, k)


def test_the_second_workloads_fit_half_miss_is_one_request_waiting_for_room() -> None:
    """The fit half's resident TTFT p50 misses (+26% to +33%; the offload / resident ratios
    with it): its nine requests' median is trace_0011's second turn, which in every run waits
    for room for its whole prompt (vLLM 0.26's scheduler_reserve_full_isl, the profile's
    admit_full_prompt) until trace_0102's first turn ends. The simulator ends that turn at
    5.88 s in every arm; the real resident runs end it at 5.70-5.76 s (the offload runs at
    5.78-5.93, around the simulated time), so the resident median waits 120-180 ms longer in
    the simulation. Without that one request the fit half's TTFT p50 is within 10% in every
    run (-9% to +2%). (Before admit_full_prompt the same request was the median too, by
    another route: the simulator admitted trace_0036 on its first chunk's blocks, preempted
    it, ended trace_0011's first turn 0.3 s late and sent its second turn after
    trace_0121's.)"""
    h = _heldout()
    v = h._validate_module()
    a, room = ("trace_0011", 1), ("trace_0102", 0)
    assert h.half_of(a[0]) == "fit"
    for run in sorted(p for p in S15.glob("*_conc4_*") if (p / "result.json").is_file()):
        real = v._real(run)
        done: list = []
        sim = v._simulated(v.sessions_for(real), real, "h200-measured", None, done)
        by = {(r.meta["session_id"], r.meta["turn"]): r for r in done}
        assert by[a].admit_s == pytest.approx(by[room].finish_s, abs=1e-6), run.name
        recs = {(x["session_id"], x["turn"]): x for x in iter_jsonl(run / "records.jsonl")}
        t0 = min(x["t_send_ns"] for x in recs.values())
        real_end_s = (recs[room]["t_last_ns"] - t0) / 1e9
        t_real, t_sim = real["ttft_by_request"], sim["ttft_by_request"]
        if real["arm"] == "resident":
            assert 0.1 < by[room].finish_s - real_end_s < 0.2, run.name
            assert t_sim[a] > 1.2 * t_real[a], run.name
        fit = [k for k in t_real if h.half_of(k[0]) == "fit" and k != a]
        p50_real = statistics.median(t_real[k] for k in fit)
        p50_sim = statistics.median(t_sim[k] for k in fit)
        assert p50_sim == pytest.approx(p50_real, rel=0.10), run.name


def test_the_first_workloads_held_out_conc4_offload_miss_is_one_more_request() -> None:
    """The held-out conc-4 offload cells' miss (p50 430 simulated against 637 / 521) is the
    count, not the TTFTs: the simulation now fits a 22nd held-out request (an unqueued host
    hit) into the 50 s where four of the five real runs have 21, so its median falls between
    the 11th and 12th, 286 and 575 ms, across the gap between the two clusters. Over the
    requests both sent, the simulated held-out p50 is within 8% of real in four of the five
    runs (the fifth, simple r1, is the run whose own median sits low in the gap: 444 ms).
    Which requests fit into the 50 s is itself noise between real repeats: two held-out
    turns start in the last 2.6 s (trace_0165's 7th, trace_0121's 10th); every simulation sends
    both, simple r0 sends both as well (its requests are the simulation's), the other four
    runs one or the other (native r0 and simple r1 the first, native r1 and r2 the second)."""
    h = _heldout()
    v = h._validate_module()
    runs = sorted(p for p in (HERE.parent / "results" / "h200" / "vllm" / "runs").glob(
        "*conc4_kvdram*") if (p / "result.json").is_file())
    assert len(runs) == 5
    close = 0
    for run in runs:
        real = v._real(run)
        sim = v._simulated(v.sessions_for(real), real, "h200-measured")
        a, b = real["ttft_by_request"], sim["ttft_by_request"]
        held_sim = sorted(t for k, t in b.items() if h.half_of(k[0]) == "held-out")
        assert len(held_sim) == 22, run.name
        last = {k for k in (("trace_0165", 6), ("trace_0121", 9)) if k in a}
        assert last == ({("trace_0165", 6), ("trace_0121", 9)} if run.name.endswith("simple")
                        else {("trace_0165", 6)} if run.name.endswith(("native", "simple__r1"))
                        else {("trace_0121", 9)}), run.name
        assert (set(a) == set(b)) == run.name.endswith("simple"), run.name
        lo, hi = held_sim[10], held_sim[11]
        assert hi - lo > 250 and statistics.median(held_sim) == pytest.approx((lo + hi) / 2)
        common = [k for k in a if k in b and h.half_of(k[0]) == "held-out"]
        p50_real = statistics.median(a[k] for k in common)
        p50_sim = statistics.median(b[k] for k in common)
        close += abs(p50_sim / p50_real - 1) < 0.08
    assert close == 4


def test_an_arm_never_pools_runs_of_two_workloads(tmp_path) -> None:
    """The committed resident run and a session-15 one share their job options but not
    their sessions: heldout.py refuses to score them as repeats of one arm against one
    simulation (before, the group took the first run's simulation for both)."""
    import shutil

    for src in (HERE.parent / "results" / "h200" / "vllm" / "runs" / "qwen3-8b_tp1_conc4_kvnone",
                S15 / "qwen3-8b_tp1_conc4_kvnone__r3"):
        shutil.copytree(src, tmp_path / src.name)
    with pytest.raises(ValueError, match="qwen3-8b_tp1_conc4_kvnone__r3: another workload"):
        _heldout().evaluate(tmp_path)
