"""The continuous-batching engine: hand-computed timelines and step-by-step equivalence."""

from __future__ import annotations

import math

import pytest
from sim.conftest import MOONCAKE, plain_costs

from kvbench.sim import Engine, EngineConfig, SimRequest, SimSetup, TieredCache, load_traces, run


def req(rid, n_in, n_out, keys=None, at=0.0, page=100) -> SimRequest:
    keys = keys if keys is not None else [f"r{rid}-{i}" for i in range(n_in // page)]
    return SimRequest(rid=rid, arrival_s=at, input_tokens=n_in, output_tokens=n_out, keys=keys,
                      page_tokens=page)


def engine(costs, gpu=math.inf, **cfg) -> tuple[Engine, list[SimRequest]]:
    done: list[SimRequest] = []
    return Engine(TieredCache(gpu), costs, EngineConfig(**cfg), on_finish=done.append), done


def test_one_request_timeline(costs):
    eng, done = engine(costs)
    r = req(0, 1000, 11)
    eng.submit(r)
    eng.run_until()
    ttft = costs.step_s([(1000, 0)], 0, 0)
    assert r.first_s == pytest.approx(ttft)
    # 10 decode steps over a context that grows from 1000 by one token per step
    assert r.finish_s == pytest.approx(ttft + costs.decode_steps_s(1, 1000, 1, 10))
    assert done == [r] and eng.is_idle()


def test_chunked_prefill_splits_a_long_prompt(costs):
    eng, _ = engine(costs, chunked_prefill_tokens=400)
    r = req(0, 1000, 1)
    eng.submit(r)
    eng.run_until()
    expected = sum(costs.step_s([(n, c)], 0, 0) for n, c in [(400, 0), (400, 400), (200, 800)])
    assert r.first_s == pytest.approx(expected) and r.finish_s == r.first_s


def test_second_request_hits_the_first_ones_pages_and_prefills_less(costs):
    eng, _ = engine(costs)
    a = req(0, 1000, 1, keys=list(range(10)))
    b = req(1, 1200, 1, keys=[*range(10), 99, 98], at=1.0)
    eng.submit(a)
    eng.submit(b)
    eng.run_until()
    assert (b.device_hit_tokens, b.host_hit_tokens) == (1000, 0)
    assert b.ttft_s == pytest.approx(costs.step_s([(200, 1000)], 0, 0))


def test_running_cap_queues_the_rest(costs):
    eng, _ = engine(costs, max_running_requests=1)
    a, b = req(0, 100, 5), req(1, 100, 5)
    eng.submit(a)
    eng.submit(b)
    eng.run_until()
    assert b.admit_s == pytest.approx(a.finish_s)


def test_request_larger_than_the_gpu_tier_is_an_error_not_a_hang(costs):
    eng, done = engine(costs, gpu=500)
    big, small = req(0, 1000, 1), req(1, 100, 1)
    eng.submit(big)
    eng.submit(small)
    eng.run_until()
    assert big.error and small.error is None and len(done) == 2


def test_speculative_decoding_finishes_sooner(costs):
    plain_eng, _ = engine(costs)
    spec_eng, _ = engine(costs.with_speculation(accept_length=3, verify_tokens=4,
                                                draft_overhead_fraction=0.0))
    a, b = req(0, 1000, 301), req(1, 1000, 301)
    plain_eng.submit(a)
    spec_eng.submit(b)
    plain_eng.run_until()
    spec_eng.run_until()
    assert b.e2e_s < a.e2e_s / 2.5


def test_horizon_stops_before_a_step_that_ends_later(costs):
    eng, _ = engine(costs, fast_forward=False)
    events = []
    r = req(0, 1000, 3)
    r.sink = lambda rq, ev, n, t: events.append((ev, n))
    eng.submit(r)
    eng.run_until(1e-9)
    assert events == [] and eng.next_event_s() > 1e-9
    eng.run_until()
    assert events == [("first", 1), ("tokens", 1), ("tokens", 1), ("finish", 0)]


def test_fast_forward_matches_step_by_step_on_a_real_trace():
    traces = load_traces([MOONCAKE])
    traces[0].sessions[:] = traces[0].sessions[:600]
    costs = plain_costs(step_overhead_s=1e-3)
    results = []
    for ff in (True, False):
        setup = SimSetup(gpu_tokens=400_000, host_tokens=800_000,
                         engine=EngineConfig(fast_forward=ff))
        results.append(run(traces, costs, setup))
    fast, slow = results
    assert fast["cached_tokens"] == slow["cached_tokens"]
    for key in ("ttft_ms", "e2e_ms"):
        for q in ("mean", "p50", "p99"):
            assert fast[key][q] == pytest.approx(slow[key][q], rel=1e-6)


@pytest.mark.parametrize("policy", ["write_back", "write_through"])
def test_write_back_pays_its_copy_when_evicting_write_through_does_not(costs, policy):
    done: list[SimRequest] = []
    eng = Engine(TieredCache(1100, 2000, policy), costs, on_finish=done.append)
    a = req(0, 1000, 1, keys=list(range(10)))
    b = req(1, 1000, 1, keys=list(range(100, 110)), at=1.0)
    eng.submit(a)
    eng.submit(b)
    eng.run_until()
    # b needs 1000 + 1 tokens, 99 are free: a's 10 pages (1000 tokens) are evicted
    sync = 1000 if policy == "write_back" else 0
    assert b.ttft_s == pytest.approx(costs.step_s([(1000, 0)], 0, 0, sync_backup_tokens=sync))
    assert eng.cache.match_tokens(list(range(10))) == (0, 1000)  # on host either way


@pytest.mark.parametrize(("interval", "steps"), [(1, 4), (10, 10)])
def test_a_request_arriving_during_decode_waits_for_the_receive_interval(
        costs, interval: int, steps: int):
    """SGLang's --scheduler-recv-interval 10 (issue 37's recipe): the scheduler takes new
    requests in once its counter of decode steps since the last prefill reaches 10, so a
    request arriving just after the 3rd decode step of another is admitted after the 10th
    (after the 4th, the first boundary after it, with the default 1)."""
    eng, _ = engine(costs, recv_interval_steps=interval)
    a = req(0, 1000, 50)
    eng.submit(a)
    first = costs.step_s([(1000, 0)], 0, 0)
    b = req(1, 500, 2, at=first + costs.decode_steps_s(1, 1000, 1, 3) + 1e-9)
    eng.submit(b, b.arrival_s)
    eng.run_until()
    assert a.first_s == pytest.approx(first)
    assert b.admit_s == pytest.approx(first + costs.decode_steps_s(1, 1000, 1, steps))


def test_an_idle_scheduler_receives_at_once_whatever_the_interval(costs):
    """With nothing running the scheduler loop spins without batches, so its counter reaches
    the interval at once: a request arriving then starts on arrival."""
    eng, done = engine(costs, recv_interval_steps=10)
    a, b = req(0, 1000, 5), req(1, 1000, 5, at=10.0)
    eng.submit(a)
    eng.submit(b, 10.0)
    eng.run_until()
    assert a.finish_s < 10.0 and b.admit_s == 10.0 and len(done) == 2
