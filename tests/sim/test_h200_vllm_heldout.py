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
import math
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


def _whole_runs_of_s15(conc: int, requests: int, tok_s_rel: float = 0.02,
                      ttft_missed: tuple[str, ...] = ()) -> list[dict]:
    """validate_sim.py's rows of the runs-s15 runs at `conc`, each checked against what both
    concurrencies meet: the same requests sent, TTFT p50 within 10% (but in the arms named
    in `ttft_missed`), the median per-request TTFT ratio within 7%, output tok/s within
    `tok_s_rel`,
    device and host hit rates within a point."""
    runs = [r for r in _heldout()._validate_module().evaluate(S15) if r["conc"] == conc]
    for r in runs:
        real, sim = r["real"], r["sim"]
        assert r["same_requests"] == r["union_requests"] == requests, r["job"]
        if r["arm"] not in ttft_missed:
            assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.10), r["job"]
        assert r["ttft_request_ratio_p50"] == pytest.approx(1.0, abs=0.07), r["job"]
        assert sim["output_tok_s"] == pytest.approx(real["output_tok_s"], rel=tok_s_rel), r["job"]
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


# The same workload at conc 6: session 16's resident and simple runs, session 22's native
# runs and repeats (3 resident, 3 native, 2 simple). Nothing was fitted on them (load_stall.py
# leaves session 22's out of its fit). Per request the simulator is unbiased in every run
# (median simulated / real TTFT 0.94-1.03); the whole runs' native TTFT p50 misses (+17% to
# +24%: 692-736 ms real, 858 simulated), and the held-out medians of both offload arms miss
# by far more, all by one request (below).


def test_the_second_workload_at_conc6_on_whole_runs_and_the_held_out_half() -> None:
    runs = _whole_runs_of_s15(6, 23, 0.03, ttft_missed=("vllm-native",))
    assert sorted(r["arm"] for r in runs) == [
        "resident", "resident", "resident", "vllm-native", "vllm-native", "vllm-native",
        "vllm-simple", "vllm-simple"]
    for r in runs:
        if r["arm"] == "vllm-native":  # the measured miss, every repeat
            assert 1.15 < r["sim"]["ttft_p50_ms"] / r["real"]["ttft_p50_ms"] < 1.25, r["job"]
    rows = _halves_of_s15(6, 0.03)
    assert {(r["half"], r["arm"]) for r in rows} == {
        (h, a) for h in ("fit", "held-out") for a in ("resident", "vllm-native", "vllm-simple")}
    for r in rows:
        name = (r["half"], r["conc"], r["arm"])
        real, sim = r["real"], r["sim"]
        if r["half"] == "fit" or r["arm"] == "resident":
            assert sim["ttft_p50_ms"] == pytest.approx(real["ttft_p50_ms"], rel=0.10), name
        else:  # the held-out offload medians: trace_0165's fourth turn (the next test)
            assert sim["ttft_p50_ms"] < 0.5 * real["ttft_p50_ms"], name


def test_the_conc6_held_out_offload_miss_is_one_request_that_races_another() -> None:
    """The held-out offload medians (native 704 ms real, 264 simulated; simple 596 and 264)
    turn on trace_0165's fourth turn, a 20K-token host hit: the simulator admits it at once
    (190 ms), while in every native run and one of the two simple runs it waits 680-900 ms
    behind trace_0289's first turn, a cold 18.8K-token prefill. Which of the two reaches the
    server first decides it, and they arrive within 150 ms of each other, 31 s into the run:
    the cold prefill starts the lane trace_0260's fourth turn frees, the hit follows its
    previous turn by a 5.9 s think time. In the native runs the cold prefill is 120-150 ms
    ahead; the simulation ends trace_0260's turn 100-220 ms later than they do (native's cold
    prefills run 2-4% faster than simple's, which the profile does not tell apart) and so
    sends the hit 20 ms ahead; the real simple arm has it both ways between repeats. So the
    held-out median of 11 requests at conc 6 is one coin; per request the simulator's
    held-out median bias is within 4% in both offload arms. The whole native runs' median
    miss is the same race, seen from its other side: the cold prefill that waits in the
    simulation (858 ms against 636-662) is its 12th of 23."""
    h = _heldout()
    v = h._validate_module()
    hit, cold = ("trace_0165", 3), ("trace_0289", 0)
    assert h.half_of(hit[0]) == "held-out"
    waited: dict[str, list[bool]] = {}
    logs: dict[str, list[float]] = {}
    for run in sorted(S15.glob("*_conc6_kvdram-*")):
        real = v._real(run)
        done: list = []
        sim = v._simulated(v.sessions_for(real), real, "h200-measured", None, done)
        by = {(r.meta["session_id"], r.meta["turn"]): r for r in done}
        assert 0 < by[cold].arrival_s - by[hit].arrival_s < 0.05  # simulated: the hit first
        assert by[hit].ttft_s < 0.25
        recs = {(x["session_id"], x["turn"]): x for x in iter_jsonl(run / "records.jsonl")}
        ahead_s = (recs[hit]["t_send_ns"] - recs[cold]["t_send_ns"]) / 1e9
        assert abs(ahead_s) < 0.2, run.name
        ttft_ms = real["ttft_by_request"][hit]
        # it waits when, and only when, the cold prefill reached the server first
        assert (ttft_ms > 600) == (ahead_s >= 0), run.name
        waited.setdefault(real["arm"], []).append(ttft_ms > 600)
        # the whole run's median too: with the two racing requests as measured, the
        # simulated one is within 10% of every run's (native: +17% to +24% as simulated)
        swapped = {**sim["ttft_by_request"], hit: ttft_ms, cold: real["ttft_by_request"][cold]}
        assert statistics.median(swapped.values()) == pytest.approx(
            statistics.median(real["ttft_by_request"].values()), rel=0.10), run.name
        logs.setdefault(real["arm"], []).extend(
            math.log(sim["ttft_by_request"][k] / t)
            for k, t in real["ttft_by_request"].items() if h.half_of(k[0]) == "held-out")
    assert waited == {"vllm-native": [True, True, True], "vllm-simple": [False, True]}
    for arm, x in logs.items():
        assert abs(statistics.median(x)) < 0.04, arm


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
