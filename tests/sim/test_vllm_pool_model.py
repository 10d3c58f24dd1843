"""The run-keeping `BlockPool` (sim/blocks.py) against vLLM's pool kept block by block: the
same calls in random order, as the scheduler makes them (a hit taken or given back, chunks
cached, requests freed), leave the same free queue, prefix hits, host LRU and counters.
The model is the plain reading of vllm/v1/core/block_pool.py: a reference count per cached
block, the free queue (kv_cache_utils.FreeKVCacheBlockQueue) and the CPU tier's LRU as
ordered dicts."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from kvbench.sim.blocks import BlockPool

B = 16


class UnitPool:
    """vLLM's block pool, one dict entry per block (one block per unit)."""

    def __init__(self, device_blocks: int, host_blocks: int) -> None:
        self.refs: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()  # head evicted first
        self.plain_free = device_blocks
        self.host: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.host_capacity = host_blocks
        self.evicted = self.stored = self.host_evicted = 0

    def match(self, chain: list[int], limit: int) -> tuple[int, int]:
        d = 0
        while d < limit and chain[d] in self.refs:
            d += 1
        h = d
        while self.host_capacity and h < limit and chain[h] in self.host:
            h += 1
        return d, h - d

    def free_units(self, chain: list[int], stop: int) -> int:
        return sum(self.refs[h] == 0 for h in chain[:stop])

    def num_free(self) -> int:
        return self.plain_free + len(self.free)

    def allocate(self, n: int) -> None:
        take = min(n, self.plain_free)
        self.plain_free -= take
        for _ in range(n - take):
            del self.refs[self.free.popitem(last=False)[0]]
            self.evicted += 1

    def touch(self, chain: list[int], stop: int) -> None:
        for h in chain[:stop]:
            if self.refs[h] == 0:
                del self.free[h]
            self.refs[h] += 1

    def release(self, chain: list[int], cached: int, plain: int) -> None:
        self.plain_free += plain
        for h in reversed(chain[:cached]):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.free[h] = None

    def requeue(self, chain: list[int], stop: int) -> None:
        self.touch(chain, stop)
        self.release(chain, stop, 0)

    def cache(self, chain: list[int], start: int, stop: int) -> None:
        for h in chain[start:stop]:
            if h in self.refs:  # computed by another request first: shared
                if self.refs[h] == 0:
                    del self.free[h]
                self.refs[h] += 1
                self.plain_free += 1
                continue
            self.refs[h] = 1
            if not self.host_capacity:
                continue
            if h in self.host:
                self.host.move_to_end(h)
                continue
            if len(self.host) >= self.host_capacity:
                self.host.popitem(last=False)
                self.host_evicted += 1
            self.host[h] = None
            self.stored += 1


def _chains(rng: random.Random, n: int) -> list[list[int]]:
    """Hash chains of random prompts, most of them sharing a prefix with an earlier one."""
    prompts: list[list[int]] = []
    for _ in range(n):
        base = rng.choice(prompts) if prompts and rng.random() < 0.7 else []
        prompts.append(base[:rng.randint(0, len(base))]
                       + [rng.randint(0, 3) for _ in range(rng.randint(1, 12))])
    chains = []
    for keys in prompts:
        prev, chain = 0, []
        for key in keys:
            prev = hash((prev, key))
            chain.append(prev)
        chains.append(chain)
    return chains


def _same(pool: BlockPool, model: UnitPool, chains: list[list[int]]) -> None:
    assert pool.free_cached == list(model.free)
    assert (pool.plain_free, pool.num_free) == (model.plain_free, model.num_free())
    assert list(pool.host) == list(model.host)
    c = pool.counters
    assert (c.device_evicted_tokens, c.backup_tokens, c.host_evicted_tokens) == (
        model.evicted * B, model.stored * B, model.host_evicted * B)
    for chain in chains:
        assert pool.match(chain, len(chain)) == model.match(chain, len(chain))


def _replay(seed: int) -> None:
    rng = random.Random(seed)
    device, host = rng.randint(4, 40), rng.choice([0, rng.randint(1, 30)])
    pool, model = BlockPool(device, B, host), UnitPool(device, host)
    chains = _chains(rng, 12)
    held: dict[int, list] = {}  # request -> [chain, cached units, plain blocks, its tail]
    for rid in range(300):
        op = rng.random()
        if op < 0.4 and len(held) < 6:  # a waiting request: admitted, or its hit given back
            chain = rng.choice(chains)
            limit = rng.randint(0, len(chain))
            dev, hit, run = pool.lookup(chain, limit)
            assert (dev, hit) == model.match(chain, limit)
            queued = pool.free_units(run, dev)
            assert queued == model.free_units(chain, dev)
            need = hit + rng.randint(0, 2)
            if rng.random() < 0.3 or need > pool.num_free - queued:
                pool.requeue(run, dev)
                model.requeue(chain, dev)
            else:
                tail = pool.touch(run, dev)
                pool.allocate(need)
                tail = pool.cache(tail, chain, dev, dev + hit)  # host hits, loaded
                model.touch(chain, dev)
                model.allocate(need)
                model.cache(chain, dev, dev + hit)
                held[rid] = [chain, dev + hit, need - hit, tail]
        elif op < 0.75 and held:  # a running request's next chunk
            state = held[rng.choice(list(held))]
            chain, cached, plain, tail = state
            if cached < len(chain):
                m = rng.randint(1, len(chain) - cached)
                if pool.can_allocate(max(0, m - plain)):
                    pool.allocate(max(0, m - plain))
                    tail = pool.cache(tail, chain, cached, cached + m)
                    model.allocate(max(0, m - plain))
                    model.cache(chain, cached, cached + m)
                    state[1:] = [cached + m, max(0, plain - m), tail]
        elif held:  # a request ends or is preempted
            chain, cached, plain, tail = held.pop(rng.choice(list(held)))
            pool.release(tail, plain)
            model.release(chain, cached, plain)
        _same(pool, model, chains)


@pytest.mark.parametrize("first", range(0, 400, 100))
def test_runs_behave_as_blocks(first: int) -> None:
    for seed in range(first, first + 100):
        _replay(seed)
