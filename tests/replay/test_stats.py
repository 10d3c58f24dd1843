from __future__ import annotations

import pytest

from kvbench.replay import summarize
from kvbench.replay.stream import StreamResult, split_tokens


def _rec(**kw) -> dict:
    base = {"request_id": "0-1", "session_id": "s", "turn": 0, "lane": 0, "is_warmup": False,
            "t_target_ns": 100, "t_send_ns": 100, "t_first_ns": 10_000_100,
            "t_last_ns": 40_000_100, "chunk_ns": [10_000_100, 20_000_100, 40_000_100],
            "chunk_tokens": [1, 1, 2], "prompt_tokens": 1000, "completion_tokens": 4,
            "cached_tokens": 250, "sent_prompt_tokens": 990, "max_tokens": 4, "status": "ok",
            "error": None, "error_kind": None}
    base.update(kw)
    return base


def test_hand_computed_latencies():
    s = summarize([_rec()])
    assert s["ttft_ms"]["mean"] == pytest.approx(10.0)
    assert s["e2e_ms"]["mean"] == pytest.approx(40.0)
    # (40 - 10) ms over 4 - 1 tokens after the first chunk
    assert s["tpot_ms"]["mean"] == pytest.approx(10.0)
    assert s["interactivity_tok_s"]["mean"] == pytest.approx(100.0)
    # gaps 10 ms (1 token) and 20 ms carrying 2 tokens -> 10, 10, 10
    assert s["itl_ms"]["n"] == 3
    assert s["itl_ms"]["p99"] == pytest.approx(10.0)
    assert s["cache"]["hit_rate"] == pytest.approx(0.25)


def test_time_scale_reports_the_servers_clock():
    # a server running 50x faster than wall time: 10 ms of wall TTFT is 500 ms of its time
    wall = summarize([_rec()])
    s = summarize([_rec()], time_scale=50.0)
    assert s["time_scale"] == 50.0
    assert s["ttft_ms"]["mean"] == pytest.approx(500.0)
    assert s["e2e_ms"]["p99"] == pytest.approx(2000.0)
    assert s["tpot_ms"]["mean"] == pytest.approx(500.0)
    assert s["itl_ms"]["n"] == 3  # counts do not scale
    assert s["interactivity_tok_s"]["mean"] == pytest.approx(2.0)
    assert s["throughput"]["output_tok_s"] == pytest.approx(
        wall["throughput"]["output_tok_s"] / 50)
    assert s["window_s"] == pytest.approx(wall["window_s"] * 50)
    # the client's own health stays in wall time, where it saturates
    assert s["client"] == wall["client"]
    assert s["cache"] == wall["cache"]


def test_itl_below_the_clients_resolution_in_server_time_is_unknown():
    """Tokens 0.05 ms of wall time apart (a burst of one server tick) at x50 would read as
    2.5 ms of ITL in the server's clock, under the 50 ms the client resolves there: unknown,
    with the reason; TPOT stands. At x1 the same gaps are kept."""
    burst = _rec(chunk_ns=[10_000_100, 10_050_100, 10_100_100, 40_000_100],
                 chunk_tokens=[1, 1, 1, 1], completion_tokens=4)
    s = summarize([burst], time_scale=50.0)
    assert s["itl_ms"]["p50"] is None and s["itl_ms"]["n"] == 3
    assert "below the 50 ms of server time" in s["itl_ms"]["unresolved"]
    assert s["tpot_ms"]["mean"] == pytest.approx(500.0)  # (40 - 10) ms / 3 x 50
    assert summarize([burst])["itl_ms"]["p50"] == pytest.approx(0.05)
    # 10 ms wall gaps at x50 are 500 ms of server time: resolved, kept
    assert summarize([_rec()], time_scale=50.0)["itl_ms"]["p50"] == pytest.approx(500.0)


def test_warmup_and_errors_are_excluded_and_counted():
    recs = [_rec(), _rec(is_warmup=True),
            _rec(status="error", error_kind="http_500", t_first_ns=None, t_last_ns=None),
            _rec(status="cancelled", error_kind="cancelled", t_first_ns=None, t_last_ns=None)]
    s = summarize(recs, num_gpus=2)
    assert s["requests"] == {"total": 4, "profiled": 1, "warmup": 1, "errors": 1,
                             "errors_by_kind": {"http_500": 1}, "cancelled": 1}
    tp = s["throughput"]
    assert tp["output_tok_s"] == pytest.approx(4 / 0.04)
    assert tp["output_tok_s_per_gpu"] == pytest.approx(2 / 0.04)
    assert tp["input_tok_s"] == pytest.approx(1000 / 0.04)


def test_saturation_flags_from_lateness_and_loop_lag():
    late = _rec(t_target_ns=100, t_send_ns=50_000_100, t_first_ns=60_000_100,
                t_last_ns=90_000_100, chunk_ns=[60_000_100, 90_000_100], chunk_tokens=[1, 3])
    s = summarize([late], client={"loop_lag_ns": [20_000_000] * 10, "cpu_s": 1, "wall_s": 10})
    assert s["client"]["saturated"] is True
    assert len(s["client"]["reasons"]) == 2
    ok = summarize([_rec()], client={"loop_lag_ns": [100_000], "cpu_s": 1, "wall_s": 10})
    assert ok["client"]["saturated"] is False


def test_lateness_splits_at_the_prompt_being_ready():
    """30 ms late: 20 ms of it rendering the prompt after its due time, 10 ms from then to the
    write; a prompt ready before its due time leaves all the lateness to the loop."""
    ms = 1_000_000
    rendering = _rec(t_target_ns=100, t_ready_ns=100 + 20 * ms, t_send_ns=100 + 30 * ms)
    early = _rec(t_target_ns=100, t_ready_ns=50, t_send_ns=100 + 5 * ms)
    old = _rec(t_target_ns=100, t_send_ns=100 + 7 * ms)  # a record from before the split
    c = summarize([rendering])["client"]
    assert c["send_lateness_ms_p99"] == pytest.approx(30)
    assert c["send_lateness_render_ms_p99"] == pytest.approx(20)
    assert c["send_lateness_after_render_ms_p99"] == pytest.approx(10)
    c = summarize([early, old])["client"]
    assert c["send_lateness_render_ms_p99"] == 0
    assert c["send_lateness_after_render_ms_p99"] == pytest.approx(5)


def test_empty_run_has_null_statistics():
    s = summarize([])
    assert s["ttft_ms"]["p50"] is None
    assert s["throughput"]["output_tok_s"] is None


def test_split_tokens_exact_from_cumulative_usage():
    r = StreamResult(chunk_ns=[1, 2, 3], chunk_chars=[3, 3, 3], chunk_usage=[1, 3, 6],
                     completion_tokens=6)
    assert split_tokens(r) == ([1, 2, 3], "usage")


def test_split_tokens_estimates_multi_token_chunks_keeping_the_total():
    r = StreamResult(chunk_ns=[1, 2, 3], chunk_chars=[2, 2, 8], chunk_usage=[None] * 3,
                     completion_tokens=6)
    toks, source = split_tokens(r)
    assert source == "estimated" and sum(toks) == 6 and toks[2] > toks[0]
    r.completion_tokens = 3
    assert split_tokens(r) == ([1, 1, 1], "one_per_chunk")
