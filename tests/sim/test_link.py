"""The host link as one queue per direction: asynchronous backups take link time, a copy is
on the host only when its transfer ends, write-back copies wait behind the queue, loads
(the other direction) do not."""

from __future__ import annotations

import pytest

from kvbench.sim.cache import TieredCache
from kvbench.sim.link import HostLink

PAGE = 64


def _link() -> HostLink:
    # 1e5 B per token; 1 GB/s each way: 1,000 tokens take 0.1 s
    return HostLink(kv_bytes_per_token=1e5, h2d_bytes_per_s=1e9, d2h_bytes_per_s=1e9)


def test_each_direction_is_one_queue() -> None:
    link = _link()
    assert link.async_d2h(1000) == pytest.approx(0.1)  # idle: done at 0.1 s
    assert link.async_d2h(1000) == pytest.approx(0.2)  # queued behind it
    link.now_s = 0.05
    # a write-back copy of 500 tokens now waits until 0.2, then takes 0.05: 0.2 s from now
    assert link.sync_d2h_s(500) == pytest.approx(0.2)
    # a load goes the other way: 0.1 s, no wait
    assert link.load_s(1000) == pytest.approx(0.1)
    # a second load now waits for the first: done at 0.05 + 0.2
    assert link.load_s(1000) == pytest.approx(0.2)
    assert link.summary(1.0)["d2h_busy_s"] == pytest.approx(0.25)
    assert link.summary(1.0)["h2d_utilisation"] == pytest.approx(0.2)


def test_a_node_evicted_before_its_backup_lands_is_lost() -> None:
    """1,000 device and 2,000 host tokens, write-through. A (10 pages, 640 tokens) is backed
    up from t=0: on the host at 0.064 s. At 0.05 s B (15 pages, 960 tokens) evicts A, whose
    copy is not complete: lost (640 late tokens); B's backup queues behind A's (done at
    0.064 + 0.096 = 0.16 s). At 0.2 s A misses (recomputed) and evicts B, whose copy
    landed: B's return is a 960-token host hit."""
    cache = TieredCache(1000, 2000, "write_through")
    cache.link = link = _link()
    a = [("a", i) for i in range(10)]
    b = [("b", i) for i in range(15)]
    cache.release(cache.admit(a, PAGE, 0))
    link.now_s = 0.05
    adm = cache.admit(b, PAGE, 0)
    assert cache.counters.backup_late_tokens == 640
    assert link.d2h_until_s == pytest.approx(0.16)
    cache.release(adm)
    link.now_s = 0.2
    adm = cache.admit(a, PAGE, 0)
    assert (adm.device_hit_tokens, adm.host_hit_tokens) == (0, 0)
    cache.release(adm)
    link.now_s = 0.3  # A's second backup (queued at 0.2, 0.064 s) has landed
    adm = cache.admit(b, PAGE, 0)
    assert adm.host_hit_tokens == 960
    assert cache.counters.backup_late_tokens == 640


def test_an_idle_link_loses_nothing() -> None:
    cache = TieredCache(1000, 2000, "write_through")
    cache.link = link = _link()
    cache.release(cache.admit([("a", i) for i in range(10)], PAGE, 0))
    link.now_s = 1.0
    cache.release(cache.admit([("b", i) for i in range(15)], PAGE, 0))
    link.now_s = 2.0  # B's backup (queued at 1.0, 0.096 s) has landed too
    adm = cache.admit([("a", i) for i in range(10)], PAGE, 0)
    assert adm.host_hit_tokens == 640 and cache.counters.backup_late_tokens == 0
