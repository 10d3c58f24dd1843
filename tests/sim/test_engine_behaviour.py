"""Engine behaviour the InferenceX rows turn on (issue 36 item 3), each against hand-worked
cases: vLLM's CPU offload waiting for the stores of the blocks it re-allocates and its lazy
mode, SGLang's load-back threshold, Dynamo's KV-aware router, and the rows that run them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.hardware import load_hardware
from kvbench.sim.block_table import block_chain
from kvbench.sim.blocks import BlockPool
from kvbench.sim.cache import TieredCache
from kvbench.sim.costs import CostModel
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.link import HostLink
from kvbench.sim.ranks import Router, kv_cost
from kvbench.sim.request import SimRequest
from kvbench.sim.vllm import vllm_pool

B = 16
DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"


def _chain(name: str, blocks: int) -> list[int]:
    req = SimRequest(rid=0, arrival_s=0.0, input_tokens=blocks * B, output_tokens=1,
                     keys=[hash((name, i)) for i in range(blocks)], page_tokens=B)
    return block_chain(req, B).chain


def test_reallocating_blocks_whose_store_is_in_flight_waits_for_it() -> None:
    """4 blocks computed at t = 0 are stored over a link of 1 block a second (done at 4 s);
    their request ends, and new content takes 2 of them at t = 1: the step waits until the
    store ends (vLLM 0.26 flushes the store jobs of re-allocated blocks)."""
    pool = BlockPool(device_blocks=4, block_tokens=B, host_blocks=8)
    pool.link = HostLink(kv_bytes_per_token=1.0, h2d_bytes_per_s=1e9, d2h_bytes_per_s=B)
    a = _chain("a", 4)
    pool.allocate(4)
    pool.release(pool.cache(None, a, 0, 4), 0)
    pool.link.now_s = pool.sync_until_s = 1.0
    pool.allocate(2)
    assert pool.sync_until_s == pytest.approx(4.0)
    # after the stores are done, evicting costs no wait
    pool.link.now_s = pool.sync_until_s = 5.0
    pool.allocate(2)
    assert pool.sync_until_s == pytest.approx(5.0)


def test_lazy_offload_stores_only_the_blocks_next_to_be_evicted() -> None:
    """Lazy offload with a token budget of 16 keeps 2 x 1 = 2 blocks stored ahead of
    eviction: nothing is stored when computed; a step stores the 2 blocks at the free
    queue's head (a prompt's last blocks, evicted first); the next allocation of 4 blocks
    evicts those 2 (kept on the host) and 2 that were never stored (lost)."""
    pool = vllm_pool(4 * B, 8 * B, B, lazy_offload_budget_tokens=B)
    assert pool.lazy_target == 2
    a = _chain("a", 4)
    pool.allocate(4)
    pool.release(pool.cache(None, a, 0, 4), 0)
    assert len(pool.host) == 0 and pool.counters.backup_tokens == 0
    pool.lazy_store()
    assert list(pool.host) == [a[3], a[2]] and pool.counters.backup_tokens == 2 * B
    pool.lazy_store()  # held already: nothing more
    assert pool.counters.backup_tokens == 2 * B
    pool.allocate(4)
    assert pool.match(a, 4) == (0, 0)  # a's head was never stored: no CPU hit from it
    assert set(pool.host) == {a[2], a[3]}


def test_a_host_hit_under_the_load_back_threshold_is_recomputed() -> None:
    """Pages of 4 tokens: an evicted 2-page prefix (8 tokens) is under SGLang's threshold
    of 10 and is computed again, a 3-page one (12 tokens) is loaded back."""
    for pages, loaded in ((2, 0), (3, 12)):
        cache = TieredCache(device_tokens=4 * pages, host_tokens=100)
        cache.load_back_min_tokens = 10
        keys = list(range(pages))
        cache.release(cache.admit(keys, 4, 0))  # backed up on insert (write-through)
        cache.release(cache.admit([100 + k for k in keys], 4, 0))  # evicts it to the host
        adm = cache.admit(keys, 4, 0)
        assert adm is not None and adm.host_hit_tokens == loaded
        assert adm.new_tokens == 4 * pages - loaded
        cache.release(adm)


def test_the_sglang_profile_carries_the_threshold() -> None:
    from kvbench.sim.sizing import resolve_costs

    costs = resolve_costs("reference-8b", "h200", engine="sglang")
    engine = Engine(TieredCache(1000), costs)
    assert engine.cache.load_back_min_tokens == costs.load_back_min_tokens == 10


def test_the_gdn_state_is_not_taken_from_sglangs_kv_pool() -> None:
    """Issue 37's resident conc-8 run held two requests in 43,424 of its 43,680 KV tokens
    (server.log: `#running-req: 2, #full token: 43424`): SGLang keeps each request's GDN state
    in its Mamba pool. The radix engine prefills both in one step though their state (4,168
    token equivalents each for the scaled Qwen3.5) would not fit beside them."""
    from kvbench.sim.sizing import resolve_costs

    costs = resolve_costs("kvbench/qwen3.5-397b-a17b-scaled", "h200", 1)
    pool, prompt, out = 43_648, 21_504, 64
    assert 2 * (prompt + out) <= pool < 2 * (prompt + out + costs.request_state_tokens)
    done: list[SimRequest] = []
    eng = Engine(TieredCache(pool), costs, EngineConfig(chunked_prefill_tokens=1 << 16),
                 on_finish=done.append)
    for rid in (0, 1):
        eng.submit(SimRequest(rid=rid, arrival_s=0.0, input_tokens=prompt, output_tokens=out,
                              keys=[f"{rid}-{k}" for k in range(prompt // 64)], page_tokens=64))
    eng.run_until()
    assert len(done) == 2 and not any(r.error for r in done)
    assert done[0].admit_s == done[1].admit_s == 0.0
    assert done[0].first_s == done[1].first_s


def _engines(ranks: int) -> list[Engine]:
    costs = CostModel.reference(load_hardware("h200"))
    return [Engine(TieredCache(10_000), costs) for _ in range(ranks)]


def _request(rid: int, keys: list[int], session: str) -> SimRequest:
    req = SimRequest(rid=rid, arrival_s=0.0, input_tokens=len(keys) * B, output_tokens=4,
                     keys=keys, page_tokens=B)
    req.meta = {"session_id": session}
    return req


def test_kv_router_sends_a_new_session_where_its_prefix_is_cached_or_load_is_least() -> None:
    engines = _engines(3)
    # rank 1 holds the first 8 pages of the prompt; rank 0 has 2 pages of work waiting
    engines[1].cache.release(engines[1].cache.admit(list(range(8)), B, 0))
    engines[0].waiting.append(_request(9, [900, 901], "busy"))
    req = _request(1, list(range(10)), "s1")
    cost = kv_cost(engines, req)
    # prefill blocks (uncached + waiting prefill) + active blocks (waiting prompts + this one)
    assert [cost(r) for r in range(3)] == [12 + 12, 2 + 10, 10 + 10]
    router = Router("kv", 3)
    assert router.route("s1", cost) == 1
    # affinity: the session's later requests follow it, whatever the costs say
    assert router.route("s1", lambda r: 0.0 if r == 2 else 9.0) == 1
    # a session new to every rank: the least loaded, the lowest rank on a tie
    fresh = kv_cost(engines, _request(2, [500, 501], "s2"))
    assert [fresh(r) for r in range(3)] == [2 + 2 + 2 + 2, 2 + 2, 2 + 2]
    assert router.route("s2", fresh) == 1
    assert router.route("s3", lambda r: 5.0) == 0


def test_rows_get_the_routers_and_offload_modes_their_launchers_run() -> None:
    from collections import Counter

    from kvbench.capacity.jobs import model_job, router_of
    from kvbench.matrix import select_jobs
    from kvbench.matrix.selection import Selection
    from kvbench.plan import plan_job

    sel = Selection(config_files=(DATA / "nvidia-master.yaml",),
                    runner_config=DATA / "runners.yaml",
                    config_keys=("minimaxm3-fp4-b200-vllm-agentic-mtp",
                                 "dsv4-fp4-b300-vllm-agentic-mtp"))
    lazy = Counter((j.config_key, model_job(j, plan_job(j)).engine.lazy_offload)
                   for j in select_jobs(sel) if j.kv_offloading != "none")
    # minimaxm3_fp4_b200_mtp.sh: lazy always; dsv4_fp4_b300_vllm_mtp.sh: lazy without DP
    assert lazy[("minimaxm3-fp4-b200-vllm-agentic-mtp", False)] == 0
    assert lazy[("minimaxm3-fp4-b200-vllm-agentic-mtp", True)] > 0
    assert lazy[("dsv4-fp4-b300-vllm-agentic-mtp", True)] > 0
    assert lazy[("dsv4-fp4-b300-vllm-agentic-mtp", False)] > 0
    sel = Selection(config_files=(DATA / "nvidia-master.yaml",),
                    runner_config=DATA / "runners.yaml", multi_node=True,
                    scenario_types=("agentic-coding",))
    routers = Counter(router_of(j) for j in select_jobs(sel) if j.framework.startswith("dynamo"))
    assert routers["kv"] > 0 and set(routers) <= {"kv", "sticky"}
