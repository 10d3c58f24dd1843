"""The tiered radix cache: hand-computed HiCache scenarios and property tests on random
request sequences (admitted one after another, so that only the cache decides)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.errors import SimError
from kvbench.sim.cache import WRITE_POLICIES, TieredCache


def serve(cache: TieredCache, keys: list, page: int = 1, private: int = 0) -> tuple[int, int]:
    """Admit and finish one request; returns (device, host) hit tokens."""
    adm = cache.admit(keys, page, private)
    assert adm is not None
    cache.release(adm)
    return adm.device_hit_tokens, adm.host_hit_tokens


def check_invariants(cache: TieredCache) -> None:
    device = host = pinned_nodes = 0
    stack = [(cache.root, True, True)]
    while stack:
        node, parent_present, parent_on_device = stack.pop()
        present = node.device or node.host
        if node is not cache.root:
            assert parent_present or not present, "present nodes are prefix-closed"
            assert parent_on_device or not node.device, "device nodes are prefix-closed"
            assert node.lock >= 0 and (present or node.lock == 0)
            device += node.tokens if node.device else 0
            host += node.tokens if node.host else 0
            pinned_nodes += node.tokens if node.device and node.lock else 0
            assert (node in cache.device_lru) == (node.device and node.lock == 0)
            assert (node in cache.host_lru) == (node.host and not node.device and node.lock == 0)
        for child in (node.children or {}).values():
            assert child.parent is node and child.keys
            stack.append((child, present, node.device))
    assert cache.host_used == host <= cache.host_capacity
    assert cache.device_used >= device and cache.pinned_tokens >= pinned_nodes
    assert cache.device_used <= cache.device_capacity


def test_device_hit_then_lru_eviction_of_whole_leaf_nodes():
    cache = TieredCache(device_tokens=3)
    assert serve(cache, ["a", "b"]) == (0, 0)
    assert serve(cache, ["a", "c"]) == (1, 0)  # splits [a b] into [a] -> [b], [c]
    # one new page, none free: the least recently used leaf [b] goes, never its parent [a]
    assert serve(cache, ["d"]) == (0, 0)
    assert cache.match_tokens(["a", "b"]) == (1, 0)
    assert cache.match_tokens(["a", "c"]) == (2, 0)
    check_invariants(cache)


def test_eviction_takes_whole_nodes_like_sglang():
    cache = TieredCache(device_tokens=4)
    serve(cache, ["x", "y", "z"])
    serve(cache, ["w"])
    serve(cache, ["v"])  # needs one page; the LRU leaf [x y z] goes whole
    assert cache.match_tokens(["x"]) == (0, 0)
    assert cache.device_used == 2
    check_invariants(cache)


def test_partial_match_counts_only_the_matched_prefix():
    cache = TieredCache(device_tokens=math.inf)
    serve(cache, [1, 2, 3], page=64)
    assert serve(cache, [1, 2, 9, 3], page=64) == (128, 0)


def test_running_requests_pin_their_pages():
    cache = TieredCache(device_tokens=4)
    running = cache.admit(["a", "b"], 1, 0)
    assert cache.admit(["c", "d", "e"], 1, 0) is None  # only 2 evictable tokens: none
    assert cache.match_tokens(["a", "b"]) == (2, 0)  # the refusal changed nothing
    cache.release(running)
    assert cache.admit(["c", "d", "e"], 1, 0) is not None
    check_invariants(cache)


def test_host_hit_loads_back_and_keeps_the_host_copy():
    cache = TieredCache(device_tokens=2, host_tokens=4, write_policy="write_through")
    serve(cache, ["a", "b"])
    serve(cache, ["c", "d"])  # evicts a, b to host-only
    assert cache.match_tokens(["a", "b"]) == (0, 2)
    assert serve(cache, ["a", "b"]) == (0, 2)
    assert cache.counters.load_tokens == 2
    assert cache.match_tokens(["a", "b"]) == (2, 0)
    check_invariants(cache)


def test_write_back_and_write_through_differ_as_documented():
    """write_through copies every new page to host at once, so with a host tier the size
    of the GPU tier the host holds mostly copies of pages still on the GPU and a working set
    twice the GPU tier is lost; write_back copies a page only when the GPU evicts it (on the
    critical path), so the same host extends the capacity; write_through_selective copies a
    request's pages when it finishes (SGLang 0.5.17's second insert), so it backs up what
    write_through does, one request later."""
    hits = {}
    for policy in WRITE_POLICIES:
        cache = TieredCache(device_tokens=4, host_tokens=4, write_policy=policy)
        serve(cache, ["a1", "a2", "a3", "a4"])
        serve(cache, ["b1", "b2", "b3", "b4"])
        hits[policy] = serve(cache, ["a1", "a2", "a3", "a4"])
        check_invariants(cache)
        c = cache.counters
        if policy == "write_through":
            assert c.backup_tokens == 12 and c.sync_backup_tokens == 0  # every insert
        elif policy == "write_back":
            assert c.backup_tokens == 0 and c.sync_backup_tokens >= 4
        else:
            assert c.backup_tokens == 12 and c.sync_backup_tokens == 0  # at each finish
    assert hits == {"write_through": (0, 0), "write_back": (0, 4),
                    "write_through_selective": (0, 0)}


def test_selective_backs_up_a_request_when_it_finishes():
    """SGLang 0.5.17 counts inserts (after the prefill, at the finish) and backs a node up at
    the second: a prompt is on host once its own request ended, not after a second hit."""
    cache = TieredCache(device_tokens=2, host_tokens=8, write_policy="write_through_selective")
    adm = cache.admit(["a", "b"], 1, 0)
    assert cache.host_used == 0  # running: one insert so far
    cache.release(adm)
    assert cache.host_used == 2
    serve(cache, ["c", "d"])  # evicts a, b from the device
    assert serve(cache, ["a", "b"]) == (0, 2)  # their first reuse is a host hit


def test_bad_policy_is_rejected_with_the_allowed_values():
    with pytest.raises(SimError, match="write_through_selective"):
        TieredCache(10, 0, "write_around")


# -- properties on random request sequences -------------------------------------------------
@st.composite
def request_sequences(draw) -> list[list[int]]:
    seqs: list[list[int]] = []
    for i in range(draw(st.integers(1, 30))):
        keys: list[int] = []
        if seqs and draw(st.booleans()):
            base = draw(st.sampled_from(seqs))
            keys = base[: draw(st.integers(0, len(base)))]
        fresh = draw(st.integers(0 if keys else 1, 5))
        keys = keys + [draw(st.integers(0, 3)) * 1000 + i * 10 + j for j in range(fresh)]
        seqs.append(keys)
    return seqs


def total_hits(seqs, device, host, policy, page=4) -> int:
    cache = TieredCache(device, host, policy)
    hit = 0
    for keys in seqs:
        if len(keys) * page > device:
            continue  # never fits; skipped in every configuration alike
        d, h = serve(cache, keys, page)
        hit += d + h
        check_invariants(cache)
    return hit


@settings(max_examples=150, deadline=None)
@given(seqs=request_sequences(), device_pages=st.integers(1, 12), host_pages=st.integers(0, 24),
       policy=st.sampled_from(WRITE_POLICIES))
def test_host_tier_never_lowers_hits_and_never_beats_unlimited(seqs, device_pages, host_pages,
                                                               policy):
    page = 4
    device, host = device_pages * page, host_pages * page
    without = total_hits(seqs, device, 0, policy)
    with_host = total_hits(seqs, device, host, policy)
    seqs_fit = [k for k in seqs if len(k) * page <= device]
    unlimited = total_hits(seqs_fit, math.inf, 0, policy)
    assert without <= with_host <= unlimited


@settings(max_examples=100, deadline=None)
@given(seqs=request_sequences())
def test_unlimited_device_tier_reuses_every_seen_prefix(seqs):
    cache = TieredCache(math.inf)
    seen: set[tuple] = set()
    for keys in seqs:
        expected = max((i for i in range(len(keys) + 1) if tuple(keys[:i]) in seen), default=0)
        d, h = serve(cache, keys, 1)
        assert (d, h) == (expected, 0)
        seen.update(tuple(keys[:i]) for i in range(len(keys) + 1))
