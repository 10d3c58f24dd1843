"""vLLM semantics (`vllm_blocks`): the free-block queue, per-chunk allocation, preemption by
recompute and the CPU tier, each against hand-worked block counts."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from kvbench.hardware import load_hardware
from kvbench.sim.block_table import block_chain
from kvbench.sim.blocks import BlockPool
from kvbench.sim.costs import CostModel
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.request import SimRequest
from kvbench.sim.simulate import SimSetup, make_cache, run_sessions
from kvbench.sim.vllm import VllmEngine, vllm_pool
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session, Turn

COSTS = CostModel.reference(load_hardware("h200"))
B = 16


def _req(rid: int, name: str, blocks: int, out: int = 16, at: float = 0.0) -> SimRequest:
    """A prompt of `blocks` full blocks whose one page key per block is (name, i)."""
    return SimRequest(rid=rid, arrival_s=at, input_tokens=blocks * B, output_tokens=out,
                      keys=[hash((name, i)) for i in range(blocks)], page_tokens=B)


def test_free_queue_evicts_a_prompt_from_its_tail() -> None:
    pool = BlockPool(device_blocks=4, block_tokens=B)
    a = block_chain(_req(0, "a", 3), B).chain
    pool.allocate(3)
    pool.release(pool.cache(None, a, 0, 3), 0)  # freed last block first: queue a3, a2, a1
    assert list(pool.free_cached) == [a[2], a[1], a[0]] and pool.plain_free == 1
    pool.allocate(2)  # the plain block, then the queue's head: a3's hash is evicted
    dev, host, run = pool.lookup(a, 3)
    assert (dev, host) == pool.match(a, 3) == (2, 0)
    held = pool.touch(run, 2)  # a hit takes a1, a2 out of the queue
    assert pool.num_free == 0 and not pool.can_allocate(1)
    pool.release(held, 0)  # the admission did not go ahead
    assert pool.can_allocate(2) and not pool.can_allocate(3)


def test_host_tier_is_an_lru_of_stored_blocks() -> None:
    pool = BlockPool(device_blocks=8, block_tokens=B, host_blocks=2)
    a = block_chain(_req(0, "a", 3), B).chain
    pool.allocate(3)
    pool.cache(None, a, 0, 3)  # stores a1, a2, a3; the third evicts a1 from the 2-block host
    assert list(pool.host) == [a[1], a[2]]
    assert pool.counters.backup_tokens == 3 * B and pool.counters.host_evicted_tokens == B


def test_sequential_sessions_keep_the_head_of_an_evicted_prompt() -> None:
    """A, B, C, then A again, one at a time, on 100 blocks of 16 tokens; each prompt is 40
    full blocks plus 16 output tokens (41 blocks). A frees 40 cached blocks to the queue
    (a40 first) and 1 plain; B takes 41 of the 60 plain; C takes the 20 plain left and pops
    21 from the head: a40..a20. A's return finds a1..a19 cached: 19 x 16 = 304 tokens."""
    done: list[SimRequest] = []
    eng = VllmEngine(BlockPool(100, B), COSTS, EngineConfig(), on_finish=done.append)
    for i, name in enumerate("abca"):
        eng.submit(_req(i, name, 40, at=10.0 * i))
    eng.run_until()
    assert [r.device_hit_tokens for r in done] == [0, 0, 0, 304]
    assert eng.pool.preemptions == 0


def _two_prompts_on_50_blocks(costs: CostModel):
    """A then B, 40 full blocks each, both at t = 0, on 50 blocks, 256 tokens per step."""
    done: list[SimRequest] = []
    eng = VllmEngine(BlockPool(50, B), costs, EngineConfig(chunked_prefill_tokens=256),
                     on_finish=done.append)
    a, b = _req(0, "a", 40), _req(1, "b", 40)
    eng.submit(a, 0.0)
    eng.submit(b, 0.0)
    eng.run_until()
    return eng, a, b, done


def test_a_chunk_that_cannot_get_blocks_preempts_the_newest_request() -> None:
    """50 blocks, a 256-token budget per step. A (640 + 16 tokens, 41 blocks) prefills in
    chunks of 256, 256, 128 (its last chunk also takes its output block); B (same size) is
    scheduled in A's last step with the 128 tokens left: 8 blocks, 49 in use. Next step A
    decodes (1 token of the budget) and B wants 255 more tokens, 16 more blocks; 1 is free:
    B, the newest, is preempted (recompute). It cannot come back while A holds 41 blocks,
    and when it does its 8 cached blocks are hits that vLLM does not report (its cached
    tokens are counted at the first scheduling: 0)."""
    eng, a, b, done = _two_prompts_on_50_blocks(COSTS)
    assert eng.pool.preemptions == 1
    assert [r.rid for r in done] == [0, 1]
    assert a.device_hit_tokens == b.device_hit_tokens == 0
    assert b.first_s > a.finish_s  # B's prefill only finished after A released its blocks
    assert b.error is None


def test_block_chain_across_page_sizes() -> None:
    """64-token trace pages, 16-token blocks: 4 blocks per page; the 130-token prompt's
    three pages cover 8 full blocks (128 tokens); equal prefixes give equal chains."""
    r1 = SimRequest(0, 0.0, 130, 1, [1, 2, 3], 64)
    r2 = SimRequest(1, 0.0, 200, 1, [1, 2, 9, 9], 64)
    c1, c2 = block_chain(r1, 16), block_chain(r2, 16)
    assert c1.full == 8 and c2.full == 12
    assert c1.chain[:8] == c2.chain[:8] and c1.chain[8:] == []
    r3 = SimRequest(2, 0.0, 200, 1, [1, 2, 3, 4], 64)
    assert block_chain(r3, 16).chain[:12] != c2.chain[:12]


def _cyclic(n_sessions: int, turns: int, blocks: int) -> list[Session]:
    """Sessions whose every turn re-sends the same `blocks`-block context (+1 block)."""
    out = []
    for s in range(n_sessions):
        ids = tuple(range(s * 1000, s * 1000 + blocks))
        out.append(Session(f"s{s}", [Turn(blocks * B + k, 16, ids, B, think_time_s=0.0)
                                      for k in range(turns)], f"ns{s}"))
    return out


def test_contexts_beyond_the_gpu_pool_thrash_to_zero_hits() -> None:
    """4 lanes cycling 4 sessions of 40 blocks each on a 100-block pool: while one session
    thinks its blocks are evicted by the other three (each new prompt needs 41 blocks);
    vLLM's LRU with allocation per chunk leaves no session its prefix. With a host tier
    of 200 blocks every re-sent prefix is a CPU hit instead."""
    sessions = _cyclic(4, 4, 40)
    engine = EngineConfig(kv_manager="vllm_blocks", block_tokens=B, chunked_prefill_tokens=256)
    bounds = WorkloadBounds(concurrency=4)
    resident = run_sessions(sessions, COSTS, SimSetup(100 * B, 0, engine=engine), bounds)
    offload = run_sessions(sessions, COSTS, SimSetup(100 * B, 200 * B, engine=engine), bounds)
    assert resident["requests"] == offload["requests"] == 16
    assert resident["cached_tokens"]["total"] == 0
    assert resident["cache"]["preemptions"] > 0
    # the 12 later turns re-send 40 blocks: 12 x 640 = 7,680 host-hit tokens of the
    # 4 x (640 + 641 + 642 + 643) = 10,264 prompt tokens
    assert offload["cached_tokens"] == {"device": 0, "host": 7680, "total": 7680}
    assert offload["prompt_tokens"] == 10264
    assert offload["ttft_ms"]["p50"] < resident["ttft_ms"]["p50"]


def test_vllm_blocks_need_a_finite_gpu_tier() -> None:
    from kvbench.errors import SimError

    with pytest.raises(SimError, match="finite GPU tier"):
        make_cache(SimSetup(math.inf, engine=EngineConfig(kv_manager="vllm_blocks")))
    assert vllm_pool(1000, 320, 16).capacity == 62


def test_cache_units_of_a_trace_page() -> None:
    """64-token trace pages over 16-token blocks: the cache keeps one hash per page (4
    blocks). The A, B, C, A sequence above: C needs 41 blocks, takes the 20 plain ones and
    pops 6 units (24 blocks, 3 left plain): a10..a5; A's return hits a1..a4: 256 tokens."""
    done: list[SimRequest] = []
    eng = VllmEngine(BlockPool(100, B), COSTS, EngineConfig(), on_finish=done.append)
    for i, name in enumerate("abca"):
        eng.submit(SimRequest(rid=i, arrival_s=10.0 * i, input_tokens=640, output_tokens=16,
                              keys=[hash((name, p)) for p in range(10)], page_tokens=64))
    eng.run_until()
    assert [r.device_hit_tokens for r in done] == [0, 0, 0, 256]
    assert eng.pool.unit_blocks == 4 and eng.pool.plain_free + 4 * len(
        eng.pool.free_cached) == 100


def _load_costs(load_ready_steps: int) -> CostModel:
    """Round numbers: 1,000 B of KV per token over a 1 MB/s link (1 ms per token loaded), 1 ms
    of compute per prefilled token, 10 ms per step, nothing else."""
    return CostModel(weight_bytes_per_rank=0.0, kv_bytes_per_token_per_rank=1000.0,
                     flops_per_token_per_rank=1e6,
                     attention_flops_per_token_per_context_token_per_rank=0.0,
                     flops_per_s=1e9, hbm_bytes_per_s=1e15, h2d_bytes_per_s=1e6,
                     d2h_bytes_per_s=1e9, step_overhead_s=0.01, load_fixed_s=0.0,
                     load_ready_steps=load_ready_steps)


def _host_hit_beside_a_long_prefill(load_ready_steps: int) -> tuple[SimRequest, SimRequest]:
    """A (40 blocks, its first 39 stored on the host) and C (1,024 new tokens, one output
    token) arrive together; 256 tokens per step."""
    pool = BlockPool(200, B, host_blocks=100)
    a, c = _req(0, "a", 40, out=1), _req(1, "c", 64, out=1)
    pool.host.store(block_chain(a, B).chain[:39])
    eng = VllmEngine(pool, _load_costs(load_ready_steps),
                     EngineConfig(chunked_prefill_tokens=256))
    eng.submit(a, 0.0)
    eng.submit(c, 0.0)
    eng.run_until()
    return a, c


def test_a_host_hit_waits_for_its_load_and_two_step_starts() -> None:
    """vLLM 0.26 (load_ready_steps 2): A's 39 host blocks (624 tokens) load from t = 0 while
    it computes nothing; C prefills 256 tokens per step, 0.01 + 0.256 = 0.266 s each:
    [0, .266], [.266, .532], [.532, .798], [.798, 1.064]. The load ends at 0.624, inside the
    third step; the fourth is the first to start after it (the worker's poll sees the load
    done), and it was composed before A was known to be ready; when it ends C is done, and
    the engine runs a connector-only step [1.064, 1.074] (the second start after the load);
    A's last 16 tokens are prefilled in the next: 1.074 + 0.01 + 0.016 = 1.100 s."""
    a, c = _host_hit_beside_a_long_prefill(2)
    assert a.host_hit_tokens == 624 and a.device_hit_tokens == 0
    assert c.first_s == pytest.approx(1.064, abs=1e-6)
    assert a.first_s == pytest.approx(1.100, abs=1e-6)


def test_an_overlapped_host_load_is_part_of_the_first_chunk_step() -> None:
    """load_ready_steps -1 (the load overlaps the compute): A's 16 tokens and C's first 240
    share the first step, which lasts 0.01 + max(0.256 s of compute, 0.624 s of load); C
    then takes three steps of 256 (0.266 s each) and one of its last 16 (0.026 s)."""
    a, c = _host_hit_beside_a_long_prefill(-1)
    assert a.host_hit_tokens == 624
    assert a.first_s == pytest.approx(0.634, abs=1e-6)
    assert c.first_s == pytest.approx(0.634 + 3 * 0.266 + 0.026, abs=1e-6)


def test_full_prompt_admission_holds_a_request_back_instead_of_preempting() -> None:
    """The preemption case above with vLLM 0.26's full-sequence admission check: A's first
    chunk takes 16 of the 50 blocks; B's whole prompt needs 40 and 34 are free, so B waits
    (in each step: 18 free after A's second chunk, 1 after its last) until A finishes and
    frees its 41 blocks; nothing is preempted."""
    from dataclasses import replace

    eng, a, b, done = _two_prompts_on_50_blocks(replace(COSTS, admit_full_prompt=True))
    assert eng.pool.preemptions == 0
    assert [r.rid for r in done] == [0, 1]
    assert b.admit_s == a.finish_s


def test_tokenization_delays_a_lone_host_hit_by_its_whole_prompt() -> None:
    """prompt_token_overhead_s 0.1 ms per prompt token: A (640 tokens, 624 of them on the host)
    reaches the scheduler at 0.064 s, cached tokens included. Its load (624 ms) ends at 0.688;
    connector-only steps start at 0.688 and 0.698 (the two starts after the load), and its last
    16 tokens prefill in [0.708, 0.734]: TTFT 0.734 s against 0.670 s without the cost."""
    from dataclasses import replace

    def lone(costs: CostModel) -> SimRequest:
        pool = BlockPool(200, B, host_blocks=100)
        a = _req(0, "a", 40, out=1)
        pool.host.store(block_chain(a, B).chain[:39])
        eng = VllmEngine(pool, costs, EngineConfig(chunked_prefill_tokens=256))
        eng.submit(a, 0.0)
        eng.run_until()
        return a

    plain = lone(_load_costs(2))
    tokenized = lone(replace(_load_costs(2), prompt_token_overhead_s=1e-4))
    assert plain.host_hit_tokens == tokenized.host_hit_tokens == 624
    assert plain.ttft_s == pytest.approx(0.670, abs=1e-6)
    assert tokenized.arrival_s == 0.0
    assert tokenized.ttft_s == pytest.approx(0.734, abs=1e-6)


def _tokenizer_admissions(*reqs: tuple[int, float]) -> list[float]:
    """Requests of (blocks, arrival_s) submitted in that order to an idle engine with 0.1 ms
    of tokenization per prompt token, room for all and compute too fast to matter (a step is
    its 10 ms overhead): when each is admitted."""
    from dataclasses import replace

    costs = replace(_load_costs(2), prompt_token_overhead_s=1e-4, flops_per_s=1e15)
    eng = VllmEngine(BlockPool(400, B), costs, EngineConfig(chunked_prefill_tokens=4096))
    made = [_req(i, f"r{i}", n, out=1, at=at) for i, (n, at) in enumerate(reqs)]
    for r in made:
        eng.submit(r, r.arrival_s)
    eng.run_until()
    return [r.admit_s for r in made]


def test_one_tokenizer_thread_queues_simultaneous_prompts_in_arrival_order() -> None:
    """vLLM 0.26's renderer pool has one thread (renderer_num_workers 1): A (40 blocks, 640
    tokens: 64 ms) and B (20 blocks: 32 ms) arrive together; B waits for A's tokenization,
    0.064 + 0.032 = 0.096 s (A's step [0.064, 0.074] is over by then), instead of overtaking
    it at 0.032 s."""
    a_s, b_s = _tokenizer_admissions((40, 0.0), (20, 0.0))
    assert a_s == pytest.approx(0.064, abs=1e-9)
    assert b_s == pytest.approx(0.096, abs=1e-9)


def test_the_tokenizer_follows_arrival_time_not_submission_order() -> None:
    """C is submitted first but arrives at 1.0 s; D, submitted second, arrives at 0.5 s and
    is tokenized then (10 blocks: 16 ms), not behind C; neither waits for the other."""
    c_s, d_s = _tokenizer_admissions((10, 1.0), (10, 0.5))
    assert d_s == pytest.approx(0.516, abs=1e-9)
    assert c_s == pytest.approx(1.016, abs=1e-9)


def test_an_earlier_arrival_submitted_later_is_tokenized_first() -> None:
    """C is submitted first to arrive at 1.0 s, D second to arrive at 0.995 s (a lane starting
    a session when another's turn ends): the one thread takes D first, [0.995, 1.011], and C
    once D is done, [1.011, 1.027]; a booking made when C was submitted would have held D
    back behind C (D seen at 1.032)."""
    c_s, d_s = _tokenizer_admissions((10, 1.0), (10, 0.995))
    assert d_s == pytest.approx(1.011, abs=1e-9)
    assert c_s == pytest.approx(1.027, abs=1e-9)


def _stalled_host_hit(load_stall_s: float) -> tuple[SimRequest, SimRequest]:
    """The lone host hit of the tokenization test (no tokenization) beside D, a request
    decoding 200 tokens from t = 0 (a one-block prompt)."""
    from dataclasses import replace

    pool = BlockPool(200, B, host_blocks=100)
    a, d = _req(0, "a", 40, out=1), _req(1, "d", 1, out=200)
    pool.host.store(block_chain(a, B).chain[:39])
    costs = replace(_load_costs(2), load_stall_s=load_stall_s)
    eng = VllmEngine(pool, costs, EngineConfig(chunked_prefill_tokens=256))
    eng.submit(d, 0.0)
    eng.submit(a, 0.0)
    eng.run_until()
    return a, d


def test_a_request_resumed_after_its_host_load_stalls_the_step() -> None:
    """load_stall_s 50 ms of host work to resume A after its 624 ms load, done while the step
    before runs (asynchronous scheduling): that step is one of D's decode steps, 11 ms (10 ms
    overhead + 1 ms for its token), so 39 ms of it shows, for A (TTFT) and for D decoding
    beside it (its finish: the stall is the engine's, not A's). 10 ms of host work hides
    wholly behind the 11 ms step; nothing else moves."""
    a0, d0 = _stalled_host_hit(0.0)
    a1, d1 = _stalled_host_hit(0.05)
    assert a1.host_hit_tokens == a0.host_hit_tokens == 624
    assert a1.ttft_s - a0.ttft_s == pytest.approx(0.039, abs=1e-9)
    assert d1.finish_s - d0.finish_s == pytest.approx(0.039, abs=1e-9)
    assert d1.first_s == d0.first_s
    a2, d2 = _stalled_host_hit(0.01)
    assert (a2.first_s, d2.finish_s) == (a0.first_s, d0.finish_s)


def test_the_vllm_profile_slows_host_loads_to_its_copy_size_rate() -> None:
    """engines/vllm.yaml: loads at 0.75 of h200-measured's 53.36 GB/s host-to-device rate
    (40.0 GB/s, its 2.25 MiB point), so 19,136 tokens of Qwen3-8B KV (147,456 B each, 2.82 GB)
    take 70.5 ms instead of 52.9 ms; tokenization 1.24 us per prompt token."""
    from kvbench.sim.engine_profile import load_engine_profile
    from kvbench.sim.sizing import resolve_costs

    plain = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16")
    vllm = resolve_costs("qwen3-8b", "h200-measured", 1, "bf16",
                         engine=load_engine_profile("vllm"))
    assert plain.h2d_bytes_per_s == pytest.approx(53.357e9, rel=1e-4)
    assert vllm.h2d_bytes_per_s == pytest.approx(40.018e9, rel=1e-4)
    assert (vllm.load_s(19136) - vllm.load_fixed_s) * 1e3 == pytest.approx(70.51, abs=0.01)
    assert (plain.load_s(19136) - plain.load_fixed_s) * 1e3 == pytest.approx(52.88, abs=0.01)
    assert vllm.prompt_token_overhead_s == 1.24e-6


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("load_bandwidth_efficiency", 0.0, "(0, 1]"), ("load_bandwidth_efficiency", 1.5, "(0, 1]"),
    ("prompt_token_overhead_s", -1e-6, ">= 0"), ("load_stall_s", -1e-3, ">= 0")])
def test_engine_profile_refuses_impossible_host_costs(field: str, value: float, allowed: str,
                                                      tmp_path: Path) -> None:
    from kvbench.errors import SimError
    from kvbench.sim.engine_profile import load_engine_profile

    data = load_engine_profile("vllm").model_dump()
    data[field] = {"value": value, "source": "test"}
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SimError, match=rf"{field}\b.* must be .*{re.escape(allowed)}"):
        load_engine_profile(path)
