"""The engine host's one tokenizer thread (sim/tokenizer.py) behind the arrivals queue
(sim/arrivals.py), by hand: first in, first out by arrival time, whatever the order the
prompts were submitted in."""

from __future__ import annotations

import pytest

from kvbench.sim.arrivals import Arrivals
from kvbench.sim.request import SimRequest


def _req(rid: int, arrival_s: float) -> SimRequest:
    return SimRequest(rid=rid, arrival_s=arrival_s, input_tokens=1, output_tokens=1,
                      keys=[], page_tokens=16)


def _seen(arrivals: Arrivals, until_s: float) -> dict[int, float]:
    """Step the clock from event to event up to `until_s`: when each request is seen."""
    seen: dict[int, float] = {}
    while (t := arrivals.next_s()) is not None and t <= until_s:
        seen.update((r.rid, t) for r in arrivals.pop_due(t))
    return seen


def test_prompts_are_tokenized_in_arrival_order_not_submission_order() -> None:
    """A [0, 1); B waits for A [1.0, 1.2); C is submitted early but arrives at 3.0; D fits
    before it [1.5, 2.0); E, submitted after C, arrives first (2.8) and goes first
    [2.8, 3.1): C starts when E is done [3.1, 4.1), as a one-worker pool's queue has it (a
    booking made when C was submitted does not hold E back)."""
    arrivals = Arrivals()
    for rid, (at, work) in enumerate([(0.0, 1.0), (0.5, 0.2), (3.0, 1.0), (1.5, 0.5),
                                      (2.8, 0.3)]):
        arrivals.push(_req(rid, at), work, now_s=0.0)
    seen = _seen(arrivals, 10.0)
    assert seen == pytest.approx({0: 1.0, 1: 1.2, 3: 2.0, 4: 3.1, 2: 4.1})
    assert len(arrivals) == 0


def test_a_prompt_being_tokenized_keeps_the_thread() -> None:
    """A (arrival 0, 1 s of work) has started by 0.5; B, submitted at 0.5 to arrive at once,
    waits for it; C, submitted then to arrive at 2.0, is not held back by B."""
    arrivals = Arrivals()
    arrivals.push(_req(0, 0.0), 1.0, now_s=0.0)
    assert _seen(arrivals, 0.5) == {}
    arrivals.push(_req(1, 0.5), 0.25, now_s=0.5)
    arrivals.push(_req(2, 2.0), 0.25, now_s=0.5)
    assert _seen(arrivals, 10.0) == pytest.approx({0: 1.0, 1: 1.25, 2: 2.25})


def test_push_returns_the_earliest_it_can_be_seen() -> None:
    """What push answers is a lower bound (an earlier arrival submitted later pushes it
    back); the engine only uses it to cut a decode stretch short."""
    arrivals = Arrivals()
    assert arrivals.push(_req(0, 2.0), 0.5, now_s=0.0) == 2.5
    assert arrivals.push(_req(1, 1.9), 0.5, now_s=0.0) == 2.4
    assert _seen(arrivals, 10.0) == pytest.approx({1: 2.4, 0: 2.9})


def test_a_withdrawn_prompt_leaves_the_queue() -> None:
    arrivals = Arrivals()
    a, b = _req(0, 1.0), _req(1, 1.0)
    arrivals.push(a, 0.5, now_s=0.0)
    arrivals.push(b, 0.5, now_s=0.0)
    assert arrivals.remove(a) and not arrivals.remove(a)
    assert _seen(arrivals, 10.0) == {1: 1.5}


def test_an_open_loop_trace_submitted_at_once_keeps_its_order() -> None:
    """20,000 prompts submitted before any runs (an open-loop trace), 4 ms of work every
    10 ms: each is seen 4 ms after it arrives, none waits (a heap per queue, no list
    re-sorted per submission)."""
    arrivals = Arrivals()
    for i in range(20_000):
        arrivals.push(_req(i, i * 0.01), 0.004, now_s=0.0)
    seen = _seen(arrivals, 1e9)
    assert len(seen) == 20_000
    assert max(abs(seen[i] - (i * 0.01 + 0.004)) for i in seen) < 1e-9
