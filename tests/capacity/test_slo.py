"""SLO judgement on hand-made step metrics, and the metrics from simulator requests."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvbench.capacity.slo import Slo, StepMetrics, metrics_from_replay, metrics_from_sim
from kvbench.sim.request import SimRequest


def _m(**kw) -> StepMetrics:
    base = dict(concurrency=4, requests=99, errors=1, ttft_p90_ms=900.0, itl_p99_ms=40.0,
                interactivity_p50_tok_s=30.0)
    return StepMetrics(**(base | kw))


def test_each_objective_names_what_it_breaks():
    slo = Slo(ttft_p90_ms=1000, itl_p99_ms=50, interactivity_p50_tok_s=25, failed_ratio=0.01)
    assert slo.violations(_m()) == []
    assert slo.violations(_m(ttft_p90_ms=1200.0)) == ["TTFT p90 1,200.0 ms > 1000 ms"]
    assert slo.violations(_m(itl_p99_ms=51.0)) == ["ITL p99 51.0 ms > 50 ms"]
    assert slo.violations(_m(interactivity_p50_tok_s=20.0)) == [
        "interactivity p50 20.0 tok/s < 25 tok/s"]
    assert slo.violations(_m(errors=2, requests=98)) == ["failed 2.0% > 1.0%"]
    # nothing succeeded: the latency objectives are not met either
    assert slo.violations(_m(requests=0, errors=3, ttft_p90_ms=None, itl_p99_ms=None,
                             interactivity_p50_tok_s=None)) == [
        "failed 100.0% > 1.0%", "TTFT p90 n/a ms > 1000 ms", "ITL p99 n/a ms > 50 ms",
        "interactivity p50 n/a tok/s < 25 tok/s"]


def test_an_slo_needs_a_latency_objective():
    with pytest.raises(ValidationError, match="set at least one of"):
        Slo(failed_ratio=0.1)


def _req(rid: int, arrival: float, first: float, finish: float, out: int) -> SimRequest:
    r = SimRequest(rid=rid, arrival_s=arrival, input_tokens=100, output_tokens=out, keys=[],
                   page_tokens=64)
    r.first_s, r.finish_s = first, finish
    return r


def test_sim_metrics_are_tpot_based():
    # TTFTs 100, 200, 300 ms; TPOT (finish - first) / (out - 1): 10 ms, 20 ms, 40 ms
    done = [_req(0, 0.0, 0.1, 0.1 + 0.010 * 10, 11), _req(1, 0.0, 0.2, 0.2 + 0.020 * 5, 6),
            _req(2, 1.0, 1.3, 1.3 + 0.040 * 2, 3)]
    m = metrics_from_sim(3, done)
    assert (m.requests, m.errors) == (3, 0)
    assert m.ttft_p90_ms == pytest.approx(280.0)  # numpy linear: 200 + 0.8 x 100
    assert m.itl_p99_ms == pytest.approx(39.6)  # 20 + 0.98 x 20
    assert m.interactivity_p50_tok_s == pytest.approx(50.0)  # 1000 / 20 ms


def test_replay_metrics_read_the_summary():
    summary = {"requests": {"profiled": 9, "errors": 1}, "ttft_ms": {"p90": 123.0},
               "tpot_ms": {"p99": 45.0}, "interactivity_tok_s": {"p50": 33.0}}
    m = metrics_from_replay(2, summary)
    assert (m.requests, m.errors, m.failed_ratio) == (9, 1, 0.1)
    assert (m.ttft_p90_ms, m.itl_p99_ms, m.interactivity_p50_tok_s) == (123.0, 45.0, 33.0)
