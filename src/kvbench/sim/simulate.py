"""Replay traces through the engine in virtual time (no HTTP) and summarise what happened.

Open loop (no concurrency): every request is sent at its trace time. Closed loop
(`concurrency=C`): C session lanes; a lane sends a session's next request when the previous
one finished plus the trace's think time, then moves on to the next unstarted session."""

from __future__ import annotations

import gc
import math
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from kvbench.errors import SimError
from kvbench.sim.blocks import BlockPool
from kvbench.sim.cache import TieredCache
from kvbench.sim.context import is_context_rejection
from kvbench.sim.costs import CostModel
from kvbench.sim.disagg import DisaggEngines
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.gaps import engine_gaps, itl_percentiles
from kvbench.sim.lanes import LaneDriver
from kvbench.sim.ranks import RankedEngines
from kvbench.sim.request import SimRequest
from kvbench.sim.trace import Trace, TraceRequest
from kvbench.sim.vllm import VllmEngine, vllm_pool
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session


@dataclass(frozen=True, slots=True)
class DisaggSetup:
    """Decode ranks of a disaggregated job (the SimSetup's tiers and ranks are prefill's)."""

    decode_ranks: int
    decode_gpu_tokens: float
    decode_costs: CostModel
    transfer_bytes_per_token: float  # KV bytes one prefill rank sends per prompt token
    transfer_bytes_per_s: float  # its NIC, per direction


@dataclass(frozen=True, slots=True)
class SimSetup:
    gpu_tokens: float  # math.inf = unlimited
    host_tokens: int = 0
    write_policy: str = "write_through"
    concurrency: int | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    # Open loop: trace times are multiplied by this (2.0 = half the request rate), e.g. to
    # give one simulated server its share of a trace recorded on a whole cluster.
    arrival_scale: float = 1.0
    # DP attention: ranks, each with its own tiers of the sizes above, behind a router
    # (ranks.ROUTERS); closed loop (run_sessions) only.
    dp: int = 1
    router: str = "round_robin"
    # Prefill/decode disaggregation: `dp` prefill ranks and these decode ranks.
    disagg: DisaggSetup | None = None


def _to_request(rid: int, t: TraceRequest, arrival_s: float, session: int) -> SimRequest:
    return SimRequest(rid=rid, arrival_s=arrival_s, input_tokens=t.input_tokens,
                      output_tokens=t.output_tokens, keys=t.keys, page_tokens=t.page_tokens,
                      session=session)


def run(traces: list[Trace], costs: CostModel, setup: SimSetup,
        requests: list[SimRequest] | None = None) -> dict:
    """Run the traces; returns the summary dict (see `summarize`). `requests`, when given,
    receives every finished request in completion order, for per-request comparisons; a
    request's `session` indexes the traces' non-empty sessions in order (one per file for
    kv-cache-tester traces)."""
    with gc_paused():
        cache = make_cache(setup)
        done: list[SimRequest] = [] if requests is None else requests
        sessions = [s for tr in traces for s in tr.sessions if s]
        engines: list = []
        wall_s = _timed(lambda: engines.append(_drive(sessions, cache, costs, setup, done)))
        summary = summarize(done, cache, engine_gaps(engines[0]))
        engines[0].close()
        return _finish_summary(summary, wall_s, len(done), costs, setup)


def run_sessions(sessions: list[Session], costs: CostModel, setup: SimSetup,
                 bounds: WorkloadBounds, requests: list[SimRequest] | None = None) -> dict:
    """Closed loop over workload sessions by the replay's workload bounds (`sim/lanes.py`):
    `bounds.concurrency` lanes (setup.concurrency is not used). Warm-up requests run but are
    left out of the summary, as the replay leaves them out; `requests` receives every
    finished request, warm-up included (`meta`: session_id, turn, lane, is_warmup)."""
    with gc_paused():
        return _run_sessions(sessions, costs, setup, bounds, requests)


def _run_sessions(sessions: list[Session], costs: CostModel, setup: SimSetup,
                  bounds: WorkloadBounds, requests: list[SimRequest] | None) -> dict:
    done: list[SimRequest] = [] if requests is None else requests
    caches = [make_cache(setup) for _ in range(setup.dp)]

    pd = setup.disagg

    def make_engine(**hooks) -> Engine:
        ranks = iter(caches)
        if pd is not None:
            decode_engine = replace(setup.engine, kv_manager="radix")
            return DisaggEngines(
                lambda **h: engine_for(next(ranks), costs, setup, **h), setup.dp,
                lambda **h: Engine(TieredCache(pd.decode_gpu_tokens), pd.decode_costs,
                                   decode_engine, **h),
                pd.decode_ranks, setup.router, pd.transfer_bytes_per_token,
                pd.transfer_bytes_per_s, **hooks)
        if setup.dp == 1:
            return engine_for(caches[0], costs, setup, **hooks)
        return RankedEngines(lambda **h: engine_for(next(ranks), costs, setup, **h),
                             setup.dp, setup.router, **hooks)

    driver = LaneDriver(sessions, bounds, make_engine, done)
    wall_s = _timed(driver.run)
    profiled = [r for r in done if not r.meta.get("is_warmup")]
    summary = summarize(profiled, caches[0], engine_gaps(driver.engine))
    if setup.dp > 1:
        summary["cache"] = _sum_caches([summarize([], c)["cache"] for c in caches])
        summary["link"] = None
        by_rank: list[list[SimRequest]] = [[] for _ in caches]
        for r in profiled:  # one pass, not one per rank
            rank = r.meta.get("rank")
            if rank is not None:
                by_rank[rank].append(r)
        summary["ranks"] = [
            {"rank": i, "requests": len(mine), **_hits(mine),
             "host_used_tokens": c.host_used,
             "device_evicted_tokens": c.counters.device_evicted_tokens}
            for i, (c, mine) in enumerate(zip(caches, by_rank, strict=True))]
    summary["warmup_requests"] = len(done) - len(profiled)
    summary["cancelled"] = driver.sent - len(done)
    # the warm-up before the profiling phase, and subagents alongside their parents: the
    # most profiled requests in flight at once, beside the lanes
    summary["phase"] = {"warmup_s": driver.profiling_start_s,
                        "profiling_start_s": driver.profiling_start_s,
                        "deadline_s": driver.deadline_s,
                        "warmup_failed": driver.failed_warmup[:5],
                        "warmup_error": driver.warmup_error}
    summary["inflight"] = {"max": _peak_inflight(profiled), "lanes": bounds.concurrency}
    summary = _finish_summary(summary, wall_s, len(done), costs, setup)
    summary["setup"]["concurrency"] = bounds.concurrency
    summary["setup"]["bounds"] = {f: getattr(bounds, f) for f in bounds.__slots__}
    summary["setup"]["dp"] = setup.dp
    if setup.dp > 1:
        summary["setup"]["router"] = setup.router
    if pd is not None:
        summary["setup"]["disagg"] = {
            "prefill_ranks": setup.dp, "decode_ranks": pd.decode_ranks,
            "decode_gpu_tokens": None if pd.decode_gpu_tokens == math.inf
            else int(pd.decode_gpu_tokens),
            "transfer_bytes_per_s": pd.transfer_bytes_per_s}
        summary["kv_transfer_tokens"] = driver.engine.transferred_tokens
        # prefill end -> KV on the decode rank (NIC queue + bytes / bandwidth), per request
        summary["kv_transfer_ms"] = _percentiles(
            [r.meta["kv_transfer_s"] for r in profiled if "kv_transfer_s" in r.meta], 1e3)
    driver.engine.close()
    return summary


def _peak_inflight(reqs: list[SimRequest]) -> int:
    events = sorted([(r.arrival_s, 1) for r in reqs] + [(r.finish_s, -1) for r in reqs])
    peak = now = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def _sum_caches(parts: list[dict]) -> dict:
    return {k: sum(p[k] for p in parts) for k in parts[0]}


def make_cache(setup: SimSetup):
    """The KV manager the engine profile names: SGLang's radix `TieredCache` or vLLM's
    `BlockPool` (whole blocks of `setup.engine.block_tokens`)."""
    cfg = setup.engine
    if cfg.kv_manager == "vllm_blocks":
        if setup.gpu_tokens == math.inf:
            raise SimError("the vllm_blocks KV manager needs a finite GPU tier (--gpu-tokens)")
        return vllm_pool(setup.gpu_tokens, setup.host_tokens, cfg.block_tokens,
                         cfg.chunked_prefill_tokens if cfg.lazy_offload else None)
    if cfg.kv_manager != "radix":
        raise SimError(f"kv_manager: {cfg.kv_manager!r}; allowed: radix, vllm_blocks")
    return TieredCache(setup.gpu_tokens, setup.host_tokens, setup.write_policy)


def engine_for(cache, costs: CostModel, setup: SimSetup, **hooks) -> Engine:
    if isinstance(cache, BlockPool):
        return VllmEngine(cache, costs, setup.engine, **hooks)
    return Engine(cache, costs, setup.engine, **hooks)


# objects the collector tracked after the last full pass here ("live"), and those the runs
# since have left behind (net of what they freed: garbage once their results are dropped)
_TRACKED = {"live": 0, "left": 0}


@contextmanager
def gc_paused():
    """No garbage collection inside: a run builds millions of small, long-lived objects (the
    cache tree, the requests, their page keys), which generational passes would scan over
    and over (they doubled the run time) while nothing they could free is garbage before the
    run and its summary end.

    A run unlinks its reference cycles when it ends (`Engine.close`: the cache trees' parent
    links, the hooks), so what it built is freed by reference counting as it is dropped.
    Before that it went to the oldest generation as cyclic garbage, which CPython frees
    only in a full pass, started once the objects collections promoted outgrow a quarter of
    it: every agentic row's simulate-jobs in one process peaked at 13.4 GB, and a later run
    paid for the garbage (the Qwen3.5 conc-704 group took 24.8 CPU-s after eight
    DeepSeek-V4 groups, 13.2 alone); freeing it with full passes cost 9% more CPU, about
    six times what freeing it by reference counting costs. What a caller keeps from a run
    (its requests) may still hold cycles: a run first frees what the ones before it left
    once that is more than what lives beside it (a full pass walks the live objects too:
    the corpus, 20 ms for 140K). What a run left is the collector's allocation count
    (`gc.get_count()`: tracked objects made less those freed, O(1)); counting the tracked
    objects walks them all, which after every run cost 4% of simulate-jobs' CPU."""
    was_enabled = gc.isenabled()
    if was_enabled and _TRACKED["left"] > _TRACKED["live"]:
        gc.collect()
        _TRACKED.update(live=_tracked(), left=0)
    gc.disable()
    made0 = gc.get_count()[0]
    try:
        yield
    finally:
        if was_enabled:
            _TRACKED["left"] += max(0, gc.get_count()[0] - made0)
            # what the run left goes straight to the oldest generation (freeze, then
            # unfreeze): else the first young collection after it scans all of it at once
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _tracked() -> int:
    gc.freeze()
    n = gc.get_freeze_count()
    gc.unfreeze()
    return n


def _timed(fn) -> float:
    wall0 = time.perf_counter()
    fn()
    return time.perf_counter() - wall0


def _finish_summary(summary: dict, wall_s: float, n: int, costs: CostModel,
                    setup: SimSetup) -> dict:
    summary["wall_s"] = wall_s
    summary["requests_per_wall_s"] = n / wall_s if wall_s > 0 else math.inf
    summary["setup"] = {
        "gpu_tokens": None if setup.gpu_tokens == math.inf else int(setup.gpu_tokens),
        "host_tokens": setup.host_tokens, "write_policy": setup.write_policy,
        "concurrency": setup.concurrency, "arrival_scale": setup.arrival_scale,
        "cost_model": costs.label, "engine_profile": costs.engine,
        "max_running_requests": setup.engine.max_running_requests,
        "chunked_prefill_tokens": setup.engine.chunked_prefill_tokens,
        "kv_manager": setup.engine.kv_manager,
    }
    if setup.engine.kv_manager == "vllm_blocks":
        summary["setup"]["block_tokens"] = setup.engine.block_tokens
    return summary


def _drive(sessions: list[list[TraceRequest]], cache: TieredCache, costs: CostModel,
           setup: SimSetup, done: list[SimRequest]) -> Engine:
    if not setup.arrival_scale > 0:
        raise SimError(f"arrival_scale must be > 0, got {setup.arrival_scale}")
    if setup.concurrency is None:
        engine = engine_for(cache, costs, setup, on_finish=done.append)
        rid = 0
        for sid, sess in enumerate(sessions):
            for t in sess:
                engine.submit(_to_request(rid, t, t.arrival_s * setup.arrival_scale, sid))
                rid += 1
        engine.run_until()
        return engine
    if setup.concurrency < 1:
        raise SimError(f"concurrency must be >= 1, got {setup.concurrency}")
    pending = deque(enumerate(sessions))
    cursor: dict[int, int] = {}
    counter = [0]

    def send(sid: int, at_s: float) -> None:
        t = sessions[sid][cursor[sid]]
        req = _to_request(counter[0], t, at_s, sid)
        counter[0] += 1
        engine.submit(req, at_s + (t.think_s if cursor[sid] else 0.0))

    def on_finish(req: SimRequest) -> None:
        done.append(req)
        sid = req.session
        cursor[sid] += 1
        if cursor[sid] < len(sessions[sid]):
            send(sid, engine.now_s)
        elif pending:
            nxt, _ = pending.popleft()
            cursor[nxt] = 0
            send(nxt, engine.now_s)

    engine = engine_for(cache, costs, setup, on_finish=on_finish)
    for _ in range(min(setup.concurrency, len(pending))):
        sid, _ = pending.popleft()
        cursor[sid] = 0
        send(sid, 0.0)
    engine.run_until()
    return engine


def _percentiles(values: list[float], scale: float = 1.0) -> dict[str, float | None]:
    if not values:
        return {k: None for k in ("mean", "p50", "p90", "p95", "p99", "max")}
    v = sorted(values)

    def q(p: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(p * len(v)) - 1))] * scale

    return {"mean": sum(v) / len(v) * scale, "p50": q(0.50), "p90": q(0.90), "p95": q(0.95),
            "p99": q(0.99), "max": v[-1] * scale}


def _hits(done: list[SimRequest]) -> dict:
    """Prompt tokens, cached tokens and hit rates (fractions of the prompt tokens) of the
    completed requests among `done`."""
    prompt = dev = host = 0
    for r in done:
        if r.error is None:
            prompt += r.input_tokens
            dev += r.device_hit_tokens
            host += r.host_hit_tokens

    def frac(x: int) -> float:
        return x / prompt if prompt else 0.0

    return {"hit_rate": {"device": frac(dev), "host": frac(host), "total": frac(dev + host)},
            "cached_tokens": {"device": dev, "host": host, "total": dev + host},
            "prompt_tokens": prompt}


def summarize(done: list[SimRequest], cache: TieredCache,
              gaps: tuple[list[float], list[float]] | None = None) -> dict:
    """Hit rates are fractions of the prompt tokens of completed requests; times in ms of
    simulated time; throughput over the span from the first arrival to the last finish.
    `gaps` (sim/gaps.py) gives ITL, the gap before each token; TPOT is each request's mean."""
    ok = [r for r in done if r.error is None]
    hits = _hits(ok)
    prompt = hits["prompt_tokens"]
    out = sum(r.output_tokens for r in ok)
    span = (max(r.finish_s for r in ok) - min(r.arrival_s for r in ok)) if ok else 0.0
    tpot = [(r.finish_s - r.first_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    c = cache.counters

    def rate(x: float) -> float:
        return x / span if span > 0 else 0.0

    refused = [r for r in done if is_context_rejection(r.error)]
    failed = [r for r in done if r.error is not None and not is_context_rejection(r.error)]
    return {
        "requests": len(ok),
        # failures, apart from prompts over the context (`rejected`), which the engine refuses
        # with a 400 before scheduling them (sim/context.py)
        "errors": len(failed),
        # every error counted comes with its reason
        "errors_by_reason": dict(Counter(str(r.error) for r in failed)),
        "rejected": {"context": len(refused),
                     "example": refused[0].error if refused else None},
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "cached_tokens": hits["cached_tokens"],
        "hit_rate": hits["hit_rate"],
        "ttft_ms": _percentiles([r.ttft_s for r in ok], 1e3),
        "e2e_ms": _percentiles([r.e2e_s for r in ok], 1e3),
        "itl_ms": itl_percentiles(*(gaps or ([], []))),
        "tpot_ms": _percentiles(tpot, 1e3),
        "queue_ms": _percentiles([r.admit_s - r.arrival_s for r in ok], 1e3),
        "throughput": {"input_tok_s": rate(prompt), "output_tok_s": rate(out),
                       "requests_s": rate(len(ok))},
        "duration_s": span,
        "cache": {
            "load_back_tokens": c.load_tokens, "backup_tokens": c.backup_tokens,
            "write_back_tokens": c.sync_backup_tokens,
            "device_evicted_tokens": c.device_evicted_tokens,
            "host_evicted_tokens": c.host_evicted_tokens, "dropped_tokens": c.dropped_tokens,
            "backup_failed_tokens": c.backup_failed_tokens,
            "host_used_tokens": cache.host_used,
            "preemptions": getattr(cache, "preemptions", 0),
            "backup_late_tokens": c.backup_late_tokens,
        },
        "link": cache.link.summary(span) if cache.link is not None else None,
    }
