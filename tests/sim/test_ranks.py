"""DP attention: two ranks with their own caches behind the job's router, hand-worked."""

from __future__ import annotations

import math

import pytest

from kvbench.hardware import load_hardware
from kvbench.sim.costs import CostModel
from kvbench.sim.ranks import Router
from kvbench.sim.simulate import SimSetup, run_sessions
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session, Turn

COSTS = CostModel.reference(load_hardware("h200"))
PAGE = 64


def _session(name: str, base: int) -> Session:
    """Three turns of 10, 20, 30 pages, each extending the one before."""
    ids = tuple(range(base, base + 30))
    return Session(name, [Turn(n * PAGE, 1, ids[:n], PAGE) for n in (10, 20, 30)], "global")


SESSIONS = [_session("A", 0), _session("B", 100)]
PROMPT = 2 * (640 + 1280 + 1920)


def _run(router: str) -> dict:
    return run_sessions(SESSIONS, COSTS, SimSetup(math.inf, dp=2, router=router),
                        WorkloadBounds(concurrency=1))


def test_round_robin_splits_sessions_across_ranks() -> None:
    """One lane: A1 A2 A3 B1 B2 B3 go to ranks 0 1 0 1 0 1. A2 finds nothing on rank 1;
    A3 finds A1's 10 pages on rank 0 (A2's extension is on rank 1): 640; B3 likewise on
    rank 1: 640. 1,280 of 7,680 prompt tokens."""
    s = _run("round_robin")
    assert s["cached_tokens"]["device"] == 1280
    assert s["prompt_tokens"] == PROMPT
    assert [r["requests"] for r in s["ranks"]] == [3, 3]
    assert [r["cached_tokens"]["device"] for r in s["ranks"]] == [640, 640]
    assert s["hit_rate"]["device"] == pytest.approx(1280 / PROMPT)


def test_session_routing_keeps_each_prefix_on_its_rank() -> None:
    """Sticky: each session's first request goes to the least-loaded rank (both idle: rank
    0), so all six land on rank 0; consistent hashing puts each session on its ring rank.
    Either way A2 hits 640 and A3 1,280, B likewise: 3,840 of 7,680."""
    sticky = _run("sticky")
    assert [r["requests"] for r in sticky["ranks"]] == [6, 0]
    ring = _run("consistent_hash")
    for s in (sticky, ring):
        assert s["cached_tokens"]["device"] == 3840
    router = Router("consistent_hash", 2)
    want = [0, 0]
    for name in ("A", "B"):
        want[router.ring_rank(name)] += 3
    assert [r["requests"] for r in ring["ranks"]] == want


def test_each_rank_backs_up_into_its_own_host_tier() -> None:
    """Write-through host tiers of 10,000 tokens per rank hold what each rank inserted.
    Round robin: rank 0 inserts A1 640 + A3 1,280 new + B2 1,280, rank 1 A2 1,280 + B1 640
    + B3 1,280: 3,200 each. Sticky: rank 0 inserts 640 per turn, 6 turns: 3,840; rank 1
    nothing: the same prefixes cost 6,400 host tokens spread, 3,840 kept together."""
    def host(router: str) -> list[int]:
        s = run_sessions(SESSIONS, COSTS, SimSetup(math.inf, 10_000, dp=2, router=router),
                         WorkloadBounds(concurrency=1))
        return [r["host_used_tokens"] for r in s["ranks"]]

    assert host("round_robin") == [3200, 3200]
    assert host("sticky") == [3840, 0]


def test_unknown_router_is_refused() -> None:
    from kvbench.errors import SimError

    with pytest.raises(SimError, match="router: 'random'; allowed: round_robin"):
        Router("random", 2)
