"""Property tests of the whole simulator (engine + cache + costs) on random traces."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from sim.conftest import plain_costs

from kvbench.sim import SimSetup, Trace, TraceRequest, run
from kvbench.sim.engine_config import EngineConfig

PAGE = 16


@st.composite
def random_traces(draw) -> Trace:
    reqs: list[TraceRequest] = []
    t = 0.0
    for i in range(draw(st.integers(1, 25))):
        keys: list[int] = []
        if reqs and draw(st.booleans()):
            base = draw(st.sampled_from(reqs)).keys
            keys = base[: draw(st.integers(0, len(base)))]
        keys = keys + [i * 100 + j for j in range(draw(st.integers(0 if keys else 1, 6)))]
        n_in = len(keys) * PAGE - draw(st.integers(0, PAGE - 1))
        t += draw(st.sampled_from([0.0, 0.001, 0.05, 1.0]))
        reqs.append(TraceRequest(t, 0.0, n_in, draw(st.integers(1, 40)), keys, PAGE))
    return Trace("random", PAGE, [[r] for r in reqs])


def theoretical(trace: Trace) -> int:
    seen: set[tuple] = set()
    hit = 0
    for (r,) in sorted(trace.sessions, key=lambda s: s[0].arrival_s):
        matched = max(i for i in range(len(r.keys) + 1) if i == 0 or tuple(r.keys[:i]) in seen)
        hit += min(r.input_tokens, PAGE * matched)
        seen.update(tuple(r.keys[:i]) for i in range(1, len(r.keys) + 1))
    return hit


COSTS = plain_costs(step_overhead_s=1e-3, flops_per_s=1e13)


@settings(max_examples=80, deadline=None)
@given(trace=random_traces(), gpu_pages=st.integers(0, 20), host_pages=st.integers(0, 40),
       policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
       budget=st.sampled_from([16, 64, 8192]), cap=st.sampled_from([1, 3, 256]))
def test_random_traces(trace, gpu_pages, host_pages, policy, budget, cap):
    engine = EngineConfig(max_running_requests=cap, chunked_prefill_tokens=budget)
    unlimited = run([trace], COSTS, SimSetup(math.inf, 0, policy, None, engine))
    assert unlimited["cached_tokens"]["total"] == theoretical(trace)
    assert unlimited["errors"] == 0

    # room for the largest request with its decode tokens, and some pages beside it
    largest = max(len(r.keys) * PAGE + r.output_tokens for (r,) in trace.sessions)
    gpu = largest + gpu_pages * PAGE
    finite = run([trace], COSTS, SimSetup(gpu, 0, policy, None, engine))
    offload = run([trace], COSTS, SimSetup(gpu, host_pages * PAGE, policy, None, engine))
    for s in (finite, offload):
        assert s["requests"] == len(trace.sessions) and s["errors"] == 0
        assert s["cached_tokens"]["total"] <= unlimited["cached_tokens"]["total"]
        assert 0 <= s["ttft_ms"]["p50"] <= s["e2e_ms"]["p50"]
    assert finite["hit_rate"]["host"] == 0

    # One session lane: the cache sees requests one after another, as in the cache-level
    # property, so a host tier can only add hits.
    one_lane = [run([trace], COSTS, SimSetup(gpu, h * PAGE, policy, 1, engine))
                for h in (0, host_pages)]
    assert one_lane[0]["cached_tokens"]["total"] <= one_lane[1]["cached_tokens"]["total"]


@settings(max_examples=60, deadline=None)
@given(trace=random_traces(), gpu_pages=st.integers(1, 8), cap=st.sampled_from([1, 4, 256]),
       lanes=st.sampled_from([None, 1, 3]))
def test_requests_larger_than_the_gpu_tier_fail_without_stalling_the_rest(trace, gpu_pages,
                                                                          cap, lanes):
    engine = EngineConfig(max_running_requests=cap, chunked_prefill_tokens=32)
    s = run([trace], COSTS, SimSetup(gpu_pages * PAGE, 2 * PAGE, "write_back", lanes, engine))
    fits = [r for (r,) in trace.sessions
            if len(r.keys) * PAGE + r.output_tokens <= gpu_pages * PAGE]
    assert s["requests"] == len(fits)
    assert s["requests"] + s["rejected"]["context"] == len(trace.sessions)
    assert s["errors"] == 0
