"""The engine host's one tokenizer thread (sim/tokenizer.py), by hand."""

from __future__ import annotations

import sys

import pytest

from kvbench.sim.tokenizer import TokenizerThread


def test_prompts_take_the_first_gap_at_or_after_their_arrival() -> None:
    t = TokenizerThread()
    assert t.done_s(0.0, 1.0, now_s=0.0) == 1.0          # A: [0, 1)
    assert t.done_s(0.5, 0.2, now_s=0.0) == 1.2          # B waits for A: [1.0, 1.2)
    assert t.done_s(3.0, 1.0, now_s=0.0) == 4.0          # C, submitted early: [3, 4)
    assert t.done_s(1.5, 0.5, now_s=0.0) == 2.0          # D fits before C: [1.5, 2.0)
    assert t.done_s(2.8, 0.3, now_s=0.0) == pytest.approx(4.3)  # E overlaps C: after it
    assert t.done_s(2.0, 0.0, now_s=0.0) == 2.0          # no work: no wait
    # what ended by now is dropped; what is still to come stays (C and E back to back: one)
    t.done_s(4.5, 0.1, now_s=2.5)
    assert t.starts == [3.0, 4.5] and t.ends == pytest.approx([4.3, 4.6])
    assert t.done_s(3.5, 0.1, now_s=2.5) == pytest.approx(4.4)  # F: the gap after E


def test_an_open_loop_trace_submitted_at_once_stays_linear_enough() -> None:
    """20,000 prompts submitted before any runs (an open-loop trace): each is placed by
    bisection, not by walking or sorting the whole busy list (which took minutes). The lines
    `done_s` runs are counted (sys.settrace), not timed: a bounded number per prompt."""
    t, lines = TokenizerThread(), [0]
    code = TokenizerThread.done_s.__code__

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None
        if event == "line":
            lines[0] += 1
        return trace

    sys.settrace(trace)
    try:
        for i in range(20_000):
            t.done_s(i * 0.01, 0.004, now_s=0.0)
    finally:
        sys.settrace(None)
    assert lines[0] <= 20 * 20_000, lines  # a walk past every earlier interval: ~10**8
    assert len(t.starts) == 20_000 and t.ends[-1] == pytest.approx(199.994)
