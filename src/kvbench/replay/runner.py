"""The orchestrator of one replay run: load the workload, run the lanes within their bounds,
write records as they complete and the summary at the end."""

from __future__ import annotations

import asyncio
import gc
import secrets
import time
from collections.abc import Callable
from time import perf_counter_ns

from kvbench.errors import ReplayError
from kvbench.files import JsonlWriter, read_jsonl, write_json_atomic
from kvbench.redaction import redact_json
from kvbench.replay.clock import advertised_time_scale, resolve_time_scale
from kvbench.replay.config import ReplayConfig
from kvbench.replay.health import LoopMonitor
from kvbench.replay.http import Endpoint
from kvbench.replay.lanes import Counters, Lanes
from kvbench.replay.stats import summarize
from kvbench.workload import (
    PromptBuilder,
    Session,
    SessionPool,
    SyntheticSpec,
    Vocabulary,
    generate_sessions,
    load_trace,
)

Progress = Callable[[Counters, float], None]


def load_sessions(cfg: ReplayConfig) -> list[Session]:
    if cfg.trace is not None:
        return load_trace(cfg.trace)
    spec = cfg.synthetic or SyntheticSpec(seed=cfg.seed)
    return generate_sessions(spec)


async def replay(cfg: ReplayConfig, on_progress: Progress | None = None,
                 sessions: list[Session] | None = None) -> dict:
    """Run the replay described by `cfg`; returns the summary (also written to summary.json).
    `sessions` skips loading the workload again when the caller already has it."""
    ep = Endpoint.parse(cfg.url)
    advertised = await asyncio.to_thread(advertised_time_scale, cfg.url)
    scale, scale_source = resolve_time_scale(cfg.time_scale, advertised)
    cfg = cfg.model_copy(update={"time_scale": scale})
    if sessions is None:
        sessions = load_sessions(cfg)
    token_ids = cfg.token_ids if cfg.token_ids is not None else (
        cfg.endpoint == "completions" and cfg.tokenizer is not None)
    marker = cfg.run_marker or secrets.token_hex(8)
    vocab = Vocabulary(cfg.tokenizer, token_ids=token_ids)
    prompts = PromptBuilder(vocab, marker, token_ids=token_ids)
    pool = SessionPool.for_bounds(sessions, cfg.bounds)

    out = cfg.output_dir
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    records_path.unlink(missing_ok=True)
    counters = Counters()
    monitor = LoopMonitor()
    started_wall = time.time()
    with JsonlWriter(records_path) as writer:
        lanes = Lanes(cfg, ep, pool, prompts, writer.write, counters)
        t0 = perf_counter_ns()
        if cfg.duration_s is not None:
            lanes.deadline_ns = t0 + int(cfg.duration_s * 1e9)
        # What exists now (traces, vocabulary, earlier jobs' results in a sweep) lives all
        # run: out of the collector's reach, so no full collection walks it mid-replay (one
        # took 48-60 ms in the quickstart, the loop lag that flagged its runs saturated)
        gc.freeze()
        monitor.start()
        lanes.digest.start()
        tasks = [asyncio.create_task(lanes.run_lane(i)) for i in range(cfg.concurrency)]
        ticker = None
        if on_progress is not None:
            ticker = asyncio.create_task(_tick(on_progress, counters, t0))
        try:
            await _wait(tasks, cfg, lanes)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if ticker is not None:
                ticker.cancel()
                on_progress(counters, (perf_counter_ns() - t0) / 1e9)  # type: ignore[misc]
            await lanes.digest.drain()
            await monitor.stop()
            gc.unfreeze()
    records = read_jsonl(records_path)
    summary = summarize(records, num_gpus=cfg.num_gpus, client=monitor.report(),
                        time_scale=cfg.time_scale)
    summary["run"] = {
        "url": cfg.url, "model": cfg.model, "endpoint": cfg.endpoint,
        "workload": [str(p) for p in cfg.trace] if cfg.trace else "synthetic",
        "sessions": len(sessions), "concurrency": cfg.concurrency,
        "duration_s": cfg.duration_s, "max_requests": cfg.max_requests,
        "warmup_requests": cfg.warmup_requests, "seed": cfg.seed, "run_marker": marker,
        "tokenizer": cfg.tokenizer, "prompt_token_ids": token_ids,
        "time_scale": scale, "time_scale_source": scale_source,
        "started_unix_s": started_wall, "elapsed_s": (perf_counter_ns() - t0) / 1e9,
        "connections": counters.connections(),
        "notes": sorted(set(counters.notes) | ({vocab.switched} if vocab.switched else set())),
    }
    summary = redact_json(summary)  # the url, error messages: redacted by value
    write_json_atomic(out / "summary.json", summary)
    return summary


async def _wait(tasks: list[asyncio.Task], cfg: ReplayConfig, lanes: Lanes) -> None:
    if cfg.duration_s is None:
        done, _ = await asyncio.wait(tasks)
    else:
        done, pending = await asyncio.wait(tasks, timeout=cfg.duration_s)
        lanes.stopping = True
        if pending:
            # in-flight requests may finish within the grace period; the rest are cancelled
            # and recorded as such
            more, _ = await asyncio.wait(pending, timeout=cfg.grace_s)
            done |= more
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise ReplayError(f"a session lane failed: {t.exception()!r}") from t.exception()


async def _tick(cb: Progress, counters: Counters, t0: int) -> None:
    while True:
        cb(counters, (perf_counter_ns() - t0) / 1e9)
        await asyncio.sleep(0.25)


def run_replay(config: ReplayConfig, progress: bool = False) -> dict:
    """Synchronous wrapper: runs `replay` on uvloop when available."""
    on_progress = None
    bar = None
    Endpoint.parse(config.url)
    sessions = load_sessions(config)  # bad input fails here, before any progress bar
    if progress:
        from kvbench.replay.progress import ProgressBar

        bar = ProgressBar(config)
        on_progress = bar.update
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            if bar is not None:
                with bar:
                    return runner.run(replay(config, on_progress, sessions))
            return runner.run(replay(config, on_progress, sessions))
    except OSError as e:
        raise ReplayError(f"replay failed: {e}") from e


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
