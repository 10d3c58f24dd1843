"""ITL in the simulator is the replay's: the gap before each token, pooled over tokens, not
each request's mean (TPOT). Hand-computed timelines on the plain cost model."""

from __future__ import annotations

import pytest
from sim.test_engine import engine, req

from kvbench.sim.gaps import engine_gaps, itl_percentiles


def test_weighted_nearest_rank_percentiles():
    # 100 tokens: 1 at 1 ms, 1 at 2 ms, 98 at 3 ms
    out = itl_percentiles([0.001, 0.002, 0.003], [1, 1, 98])
    assert out["p50"] == pytest.approx(3.0) and out["max"] == pytest.approx(3.0)
    assert out["mean"] == pytest.approx((1 + 2 + 98 * 3) / 100)
    # 90 tokens at 1 ms, 10 at 10 ms: p90 is still 1 ms, p95 10 ms
    out = itl_percentiles([0.010, 0.001], [10, 90])
    assert (out["p50"], out["p90"], out["p95"]) == pytest.approx((1.0, 1.0, 10.0))
    assert itl_percentiles([], [])["p50"] is None


def test_a_request_alone_has_itl_mean_equal_to_its_tpot(costs):
    eng, _ = engine(costs)
    r = req(0, 1000, 101)
    eng.submit(r)
    eng.run_until()
    gaps, tokens = engine_gaps(eng)
    assert sum(tokens) == 100  # one gap per token after the first
    itl = itl_percentiles(gaps, tokens)
    assert itl["mean"] == pytest.approx((r.finish_s - r.first_s) / 100 * 1e3)


def test_a_prefill_chunk_is_one_long_gap_not_a_slower_decode(costs):
    """B's 8,000-token prompt arrives while A decodes: A's one gap across B's prefill step is
    that step's time; its other 199 gaps are decode steps. TPOT spreads the stall over every
    token; the ITL median does not see it."""
    eng, _ = engine(costs)
    a = req(0, 1000, 201)
    eng.submit(a)
    first_a = costs.step_s([(1000, 0)], 0, 0)
    b = req(1, 8000, 1, at=first_a + 50 * costs.decode_steps_s(1, 1000, 1, 1))
    eng.submit(b)
    eng.run_until()
    gaps, tokens = engine_gaps(eng)
    itl = itl_percentiles(gaps, tokens)
    tpot_ms = (a.finish_s - a.first_s) / 200 * 1e3
    decode_ms = costs.decode_steps_s(1, 1100, 1, 1) * 1e3  # one step at A's mid context
    assert itl["p50"] == pytest.approx(decode_ms, rel=0.05)
    # the longest gap is the step that prefilled B beside A's decode
    mixed_ms = max(g for g in gaps) * 1e3
    assert mixed_ms > 20 * itl["p50"]
    assert itl["max"] == pytest.approx(mixed_ms)
    # one decoder: its TPOT is the mean of its 200 gaps, stall included; the median is not
    assert sum(tokens) == 200 and itl["mean"] == pytest.approx(tpot_ms)
    assert tpot_ms > 1.1 * itl["p50"]
