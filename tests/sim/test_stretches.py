"""Prefill stretches (engine.py `_plan_stretch`, vllm.py's for its block pool): ranks side
by side, SGLang's radix engine and vLLM's, compose a long prompt's whole-budget steps at
once and run them in pieces that end where an arrival is seen. They must change nothing:
the same requests at the same times, the same cache and host-link counters, as composing
step by step."""

from __future__ import annotations

import math

import pytest

from kvbench.sim import disagg, ranks
from kvbench.sim.costs import CostModel
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.lanes import LaneDriver
from kvbench.sim.simulate import DisaggSetup, SimSetup, run_sessions
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session, Turn

# compute-bound prefill with attention (a chunk's time grows with its context: about 1 s),
# a host link that stores a chunk's blocks in about half a step (idle in between: when a
# store starts matters) and is still storing some when their blocks are evicted
COSTS = CostModel(weight_bytes_per_rank=1e9, kv_bytes_per_token_per_rank=1e5,
                  flops_per_token_per_rank=1e9,
                  attention_flops_per_token_per_context_token_per_rank=2e4,
                  flops_per_s=1e12, hbm_bytes_per_s=1e12, h2d_bytes_per_s=2e8,
                  d2h_bytes_per_s=2e8, step_overhead_s=1e-3)
PAGE = 64


def _session(i: int) -> Session:
    """Six turns whose prompts grow by 2-5K tokens (a new prefix per session), 1-3 s apart."""
    turns, tokens = [], 0
    for k in range(6):
        tokens += 2000 + 700 * ((i + k) % 5)
        ids = tuple(1000 * i + j for j in range(tokens // PAGE))
        turns.append(Turn(tokens, 8, ids, PAGE, think_time_s=1.0 + (i * k) % 3))
    return Session(f"s{i}", turns, f"s{i}")


SESSIONS = [_session(i) for i in range(24)]
def _setup(host_tokens: int, router: str = "sticky", decode: bool = True,
           manager: str = "vllm_blocks") -> SimSetup:
    pd = DisaggSetup(decode_ranks=2, decode_gpu_tokens=400_000, decode_costs=COSTS,
                     transfer_bytes_per_token=1e5, transfer_bytes_per_s=1e10) if decode else None
    # a GPU pool of about one prompt per rank: a prompt's allocations evict units whose
    # stores are still in flight
    engine = EngineConfig(kv_manager=manager, block_tokens=16, chunked_prefill_tokens=1024)
    return SimSetup(34_000, host_tokens, engine=engine, dp=3, router=router, disagg=pd)


def _run(setup: SimSetup) -> tuple[dict, list[tuple], list[int]]:
    done: list = []
    sent: list[int] = []  # the replay's send-time decisions, in the order they are taken
    on_arrival = LaneDriver._on_arrival

    def arrival(self, req):
        sent.append(req.rid)
        return on_arrival(self, req)
    # a request cap: which requests are sent depends on the order the ranks take
    # arrivals in (the arrival hook's count), so pieces must end where arrivals are seen
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LaneDriver, "_on_arrival", arrival)
        summary = run_sessions(SESSIONS, COSTS, setup,
                               WorkloadBounds(concurrency=12, max_requests=70), requests=done)
    summary.pop("wall_s", None)
    summary.pop("requests_per_wall_s", None)
    return summary, sorted((r.rid, r.arrival_s, r.admit_s, r.first_s, r.finish_s,
                            r.device_hit_tokens, r.host_hit_tokens) for r in done), sent


def _step_by_step(engines: list[Engine], router: ranks.Router) -> None:
    for e in engines:
        e.plan_to_horizon = False


@pytest.mark.parametrize("host_tokens", [0, 200_000])
@pytest.mark.parametrize("decode", [True, False])
@pytest.mark.parametrize("manager", ["vllm_blocks", "radix"])
def test_stretches_change_nothing(monkeypatch, host_tokens: int, decode: bool,
                                  manager: str) -> None:
    planned: list[int] = []
    start = Engine._start_stretch

    def counted(self, step, ends):
        planned.append(len(ends))
        return start(self, step, ends)

    monkeypatch.setattr(Engine, "_start_stretch", counted)
    got = _run(_setup(host_tokens, decode=decode, manager=manager))
    assert planned and max(planned) >= 3  # stretches ran, several steps long
    monkeypatch.setattr(ranks, "side_by_side", _step_by_step)
    monkeypatch.setattr(disagg, "side_by_side", _step_by_step)
    planned.clear()
    want = _run(_setup(host_tokens, decode=decode, manager=manager))
    assert not planned
    assert got[2] == want[2]
    assert got[1] == want[1]
    assert got[0] == want[0]
    if host_tokens:  # the offload arm stored and evicted: its counters agree too
        assert got[0]["cache"]["device_evicted_tokens"] > 0


def test_kv_router_ranks_compose_step_by_step(monkeypatch) -> None:
    """Dynamo's KV router reads each rank's cache and prefill queue when it routes: a
    stretch's later steps take their blocks when planned, so those ranks never run one."""
    planned: list[int] = []
    monkeypatch.setattr(Engine, "_start_stretch",
                        lambda self, step, ends: planned.append(1) or step)
    _run(_setup(0, router="kv", decode=False))
    assert not planned
    assert math.isfinite(_run(_setup(0, router="kv", decode=False))[0]["ttft_ms"]["p50"])
