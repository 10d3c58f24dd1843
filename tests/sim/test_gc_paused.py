"""A simulation runs with the garbage collector paused, leaves no reference cycle behind
(its cache trees and hooks are unlinked when it ends), and first frees the cyclic garbage
earlier runs' callers left once that outweighs what lives: it sits in the oldest generation,
which CPython passes over until a full collection, so without this it would pile up run
after run (`sim/simulate.py gc_paused`)."""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import pytest

from kvbench.sim import simulate
from kvbench.sim.costs import CostModel
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.simulate import DisaggSetup, SimSetup, gc_paused, run_sessions
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session, Turn


class _Node:
    __slots__ = ("__weakref__", "other")

    def __init__(self) -> None:
        self.other: _Node | None = None


def _run_leaving_garbage(pairs: int) -> weakref.ref:
    """A run (inside `gc_paused`) whose objects are garbage once it is over: `pairs`
    reference cycles; a weak reference to one of them."""
    with gc_paused():
        nodes = [_Node() for _ in range(2 * pairs)]
        for a, b in zip(nodes[::2], nodes[1::2], strict=True):
            a.other, b.other = b, a
        ref = weakref.ref(nodes[0])
    del nodes, a, b
    return ref


def _outweighing() -> int:
    """Pairs enough to outweigh what lives: what is tracked now, or what lived at the last
    full pass if more (earlier tests' objects may have gone since)."""
    return max(len(gc.get_objects()), simulate._TRACKED["live"])


def test_a_run_first_frees_the_garbage_the_runs_before_it_left():
    gc.enable()
    ref = _run_leaving_garbage(pairs=_outweighing())  # twice what lives, and more
    with gc_paused():
        assert ref() is None
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_little_garbage_waits_for_more(monkeypatch):
    """A full pass walks what lives too: after a small run the next one does not start one."""
    gc.enable()
    _run_leaving_garbage(pairs=_outweighing())
    with gc_paused():  # frees it, and counts what lives
        pass
    _run_leaving_garbage(pairs=10)
    passes = []
    monkeypatch.setattr(gc, "collect", lambda *a: passes.append(a) or 0)
    with gc_paused():
        pass
    assert passes == []


def test_with_the_collector_off_it_stays_off_and_collects_nothing():
    gc.disable()
    try:
        ref = _run_leaving_garbage(pairs=_outweighing())
        with gc_paused():
            assert ref() is not None
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.collect()


# -- a finished run holds no reference cycle --------------------------------------------------

def _session(i: int) -> Session:
    """Five turns whose prompts grow by 1-3K tokens (a new prefix per session)."""
    turns, tokens = [], 0
    for k in range(5):
        tokens += 1000 + 500 * ((i + k) % 5)
        turns.append(Turn(tokens, 4, tuple(1000 * i + j for j in range(tokens // 64)), 64,
                          think_time_s=1.0))
    return Session(f"s{i}", turns, f"s{i}")


COSTS = CostModel(weight_bytes_per_rank=1e9, kv_bytes_per_token_per_rank=1e5,
                  flops_per_token_per_rank=1e9, flops_per_s=1e12, hbm_bytes_per_s=1e12,
                  attention_flops_per_token_per_context_token_per_rank=2e4,
                  h2d_bytes_per_s=2e8, d2h_bytes_per_s=2e8, step_overhead_s=1e-3)


@pytest.mark.parametrize("manager", ["radix", "vllm_blocks"])
@pytest.mark.parametrize(("dp", "decode"), [(1, False), (2, False), (2, True)])
def test_a_finished_run_leaves_no_reference_cycle(manager: str, dp: int, decode: bool):
    """Its cache trees (parent links), its engines' hooks (the lane driver's methods) and
    the ranks' callbacks are unlinked when it ends: what it built is freed by reference
    counting, so no collector pass has to walk it (`Engine.close`)."""
    pd = DisaggSetup(decode_ranks=1, decode_gpu_tokens=100_000, decode_costs=COSTS,
                     transfer_bytes_per_token=1e5, transfer_bytes_per_s=1e10) if decode else None
    # a GPU pool of a few prompts per rank, and a host tier: evictions, host copies, hits
    setup = SimSetup(12_000, 60_000, engine=EngineConfig(kv_manager=manager, block_tokens=16),
                     dp=dp, router="sticky", disagg=pd)
    sessions = [_session(i) for i in range(8)]
    run_sessions(sessions, COSTS, setup, WorkloadBounds(concurrency=4))  # first-use caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        summary = run_sessions(sessions, COSTS, setup, WorkloadBounds(concurrency=4))
        gc.collect()
        left = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert summary["requests"] > 20 and summary["cache"]["device_evicted_tokens"] > 0
    assert left == Counter()
