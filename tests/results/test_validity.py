"""The validity stamp from hand-made summaries and server metrics, and the compare rule that
an offload arm that never hit its host tier shows no significant delta."""

from __future__ import annotations

import pytest

from kvbench.results import build_result, compare
from kvbench.results.compare import IDLE

ROW = {"framework": "sglang", "model": "m", "conc": 4, "kv-offloading": "dram",
       "kv-offload-backend": {"name": "hicache"}, "exp-name": "x", "tp": 1}


def summary(*, sent: int = 10_000, server: int = 10_060, ideal: float = 0.8,
            warm_passed: bool = True, saturated: bool = False, ttft: float = 100.0) -> dict:
    return {
        "requests": {"total": 10, "profiled": 10, "warmup": 0, "errors": 0, "cancelled": 0,
                     "errors_by_kind": {}},
        "ttft_ms": {"p50": ttft, "p90": ttft * 2},
        "cache": {"hit_rate": 0.5, "ideal_hit_rate": ideal},
        "prompt": {"requests": 10, "sent_tokens": sent, "server_tokens": server,
                   "deviation": (server - sent) / sent, "tolerance": 0.02,
                   "agrees": abs(server - sent) / sent <= 0.02},
        "warm_cache": {"checked_sessions": 4, "suspect_sessions": 0 if warm_passed else 4,
                       "passed": warm_passed, "suspects": [] if warm_passed else [
                           {"session_id": "s0", "turn": 0, "cached_tokens": 900,
                            "allowed_tokens": 22}]},
        "client": {"saturated": saturated, "reasons": ["event-loop lag p99 30 ms > 10 ms"]
                   if saturated else []},
    }


def server(device: int, host: int, prompt: int = 10_060, offload: bool = True) -> dict:
    return {"present": True, "warnings": [], "engine_reported": {"offload_enabled": offload},
            "cache": {"gpu_cache_hit_rate": device / prompt, "cpu_cache_hit_rate": host / prompt,
                      "external_cache_hit_rate": None,
                      "overall_cache_hit_rate": (device + host) / prompt,
                      "cached_tokens_by_tier": {"device": device, "host": host,
                                                "external": None}}}


def result(row=ROW, repeat=0, **kw):
    srv = kw.pop("srv", None) or server(4000, 1000)
    return build_result(job_row=row, config_key="k", plan=None, summary=summary(**kw),
                        server=srv, telemetry=None, status="ok", fingerprint="f",
                        repeat=repeat)


def test_a_clean_offload_run_is_valid():
    r = result()
    assert r.validity["valid"] is True and r.validity["reasons"] == []
    checks = r.validity["checks"]
    assert checks["offload_tier"]["offload_hit_tokens"] == 1000
    assert checks["ideal_cache"]["achieved"]["total"] == pytest.approx(5000 / 10_060)
    assert checks["ideal_cache"]["of_ideal"] == pytest.approx(5000 / 10_060 / 0.8)
    assert checks["label"]["passed"] is True


def test_each_failed_check_is_a_reason_and_a_flag():
    r = result(server=40_000, warm_passed=False, saturated=True, srv=server(4000, 0))
    assert r.validity["valid"] is False
    names = [why.split(":")[0] for why in r.validity["reasons"]]
    assert names == ["warm_cache", "offload_tier", "client", "prompt_size"]
    assert "server counted 40,000 prompt tokens for 10,000 sent (+300.0%)" in \
        r.validity["checks"]["prompt_size"]["message"]
    codes = {f["code"] for f in r.validation["flags"]}
    assert {"warm-cache-hit", "prompt-size-mismatch", "offload-tier-never-hit",
            "client-saturated"} <= codes


def test_a_hit_rate_above_the_ceiling_is_caught():
    r = result(ideal=0.3)  # achieved 5000 / 10060 = 49.7 % > 30 % + 2
    assert r.validity["checks"]["ideal_cache"]["passed"] is False
    assert "exceeds the ideal-cache ceiling 30.0%" in r.validity["reasons"][0]


def test_an_idle_offload_arm_is_never_significant():
    resident = {**ROW, "kv-offloading": "none", "exp-name": "x_none"}
    resident.pop("kv-offload-backend")
    runs = []
    for rep, (a, b) in enumerate([(100, 60), (101, 61), (99, 59)]):
        # same hit rate (40 %), the host tier never hit; TTFT differs far beyond its spread
        runs.append(result(row=resident, repeat=rep, ttft=a,
                           srv=server(4024, 0, offload=False)))
        runs.append(result(repeat=rep, ttft=b, srv=server(4024, 0)))
    cell = compare(runs)["cells"][0]
    assert cell["offload_idle"] == ["kv_offloading=dram"]
    ttft = next(m for m in cell["metrics"] if m["metric"] == "TTFT p50 ms")
    d = ttft["deltas"]["kv_offloading=dram"]
    assert d["pct"] == pytest.approx(-40.0) and d["noise"] < 5  # the interval excludes 0 ...
    assert d["verdict"] == IDLE and d["significant"] is False  # ... yet it is no offload effect
    assert cell["validity"]["kv_offloading=dram"]["valid"] == 0
    assert cell["validity"]["kv_offloading=none"]["valid"] == 3
