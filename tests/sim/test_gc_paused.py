"""A simulation runs with the garbage collector paused, and first frees what the runs before
it left once that outweighs what lives: their cache trees and requests (reference cycles)
sit in the oldest generation, which CPython passes over until a full collection, so without
this they pile up run after run (`sim/simulate.py gc_paused`)."""

from __future__ import annotations

import gc
import weakref

from kvbench.sim import simulate
from kvbench.sim.simulate import gc_paused


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
