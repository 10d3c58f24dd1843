"""The orchestrator of one replay run: load the workload, run the lanes within their bounds,
write records as they complete and the summary at the end."""

from __future__ import annotations

import asyncio
import gc
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from time import perf_counter_ns

from kvbench.errors import ReplayError, ReplayInterrupted
from kvbench.files import (
    GZ_SUFFIX,
    JsonlWriter,
    iter_jsonl,
    read_json,
    remove_own,
    write_json_atomic,
)
from kvbench.redaction import redact_json
from kvbench.replay.clock import advertised_clock, resolve_time_scale, virtual_config
from kvbench.replay.config import ReplayConfig
from kvbench.replay.health import LoopMonitor
from kvbench.replay.http import Endpoint
from kvbench.replay.lanes import Counters, Lanes
from kvbench.replay.stats import summarize
from kvbench.replay.warmup import warm_up
from kvbench.workload import (
    PromptBuilder,
    Session,
    SessionPool,
    SyntheticSpec,
    Vocabulary,
    generate_sessions,
    load_trace,
)
from kvbench.workload.identity import identify

Progress = Callable[[Counters, float], None]
# what a run leaves in its output directory (results/store.py names the same summary)
RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"
INTERRUPTED = "interrupted"
CANCEL_AGAIN_S = 0.2


def load_sessions(cfg: ReplayConfig) -> list[Session]:
    return workload_sessions(cfg.trace, cfg.synthetic or SyntheticSpec(seed=cfg.seed))


def workload_sessions(trace: Sequence[Path] | None, synthetic: SyntheticSpec) -> list[Session]:
    """The sessions a replay sends: its traces as loaded, else the synthetic ones. (A resumed
    sweep loads them too, to tell a result of these sessions from one of others.)"""
    if trace is not None:
        return load_trace(trace)
    return generate_sessions(synthetic)


async def replay(cfg: ReplayConfig, on_progress: Progress | None = None,
                 sessions: list[Session] | None = None, *, catch_sigint: bool = False,
                 shard: tuple[int, int] = (0, 1), lane_offset: int = 0,
                 at_profiling_start: Callable[[], Awaitable[object]] | None = None) -> dict:
    """Run the replay described by `cfg`; returns the summary (also written to summary.json).
    `sessions` skips loading the workload again when the caller already has it. With
    `catch_sigint` Ctrl-C ends the run as its bound would (summary `stopped: interrupted`).
    `cfg.workers` > 1 shards the lanes over that many processes (replay/workers.py); `shard`
    and `lane_offset` are what one of those processes runs. `at_profiling_start` is awaited
    between a warm-up and the profiling phase (the scraper's baseline snapshot, as AIPerf
    scrapes at the end of its warm-up); the shards' warm-ups end apart, so a sharded replay
    does not call it (the scrape's own cadence places the baseline then)."""
    if cfg.workers > 1:
        from kvbench.replay.workers import replay_sharded

        return await replay_sharded(cfg, on_progress, sessions, catch_sigint=catch_sigint)
    ep = Endpoint.parse(cfg.url)
    advertised, virtual = await asyncio.to_thread(advertised_clock, cfg.url)
    scale, scale_source = resolve_time_scale(cfg.time_scale, advertised, virtual)
    cfg = await start_virtual(virtual_config(cfg, virtual))
    cfg = cfg.model_copy(update={"time_scale": scale})
    if sessions is None:
        sessions = load_sessions(cfg)
    token_ids = cfg.token_ids if cfg.token_ids is not None else (
        cfg.endpoint == "completions" and cfg.tokenizer is not None)
    marker = cfg.run_marker or secrets.token_hex(8)
    vocab = Vocabulary(cfg.tokenizer, token_ids=token_ids)
    prompts = PromptBuilder(vocab, marker, token_ids=token_ids)
    pool = SessionPool.for_bounds(sessions, cfg.bounds)
    # a shard replays part of the sessions: its parent identifies the whole (workers.py)
    corpus = identify(cfg.trace, sessions, cfg.corpus) if shard[1] == 1 else None

    out = cfg.output_dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in (RECORDS_FILE, RECORDS_FILE + GZ_SUFFIX):
        remove_own(out / stale)
    records_path = out / (RECORDS_FILE + (GZ_SUFFIX if cfg.compress_records else ""))
    # a summary left by an earlier run in this directory must never pass for this run's
    remove_own(out / SUMMARY_FILE)
    counters = Counters()
    monitor = LoopMonitor()
    started_wall = time.time()
    interrupted = False
    writer = JsonlWriter(records_path)
    lanes = Lanes(cfg, ep, pool, prompts, writer.write, counters, shard)
    lanes.lane_offset = lane_offset
    # installed until the summary is written, so a Ctrl-C never lands in the cleanup as a
    # KeyboardInterrupt (lanes left writing into a closed records file)
    sigint = _on_sigint(lanes) if catch_sigint else None
    try:
        t0 = perf_counter_ns()
        try:
            await _run(cfg, lanes, monitor, on_progress, t0, at_profiling_start)
        except asyncio.CancelledError:
            # the caller's own timeout, or Ctrl-C where the loop takes no signal handler: the
            # requests that finished are still summarised, then the cancellation goes on
            interrupted = True
        finally:
            lanes.closed = True  # a lane a second cancellation left behind writes nothing
            try:
                writer.close()
            except OSError as e:
                lanes.write_error = lanes.write_error or e
        if lanes.write_error is not None:
            raise ReplayError(f"cannot write {records_path}: "
                              f"{lanes.write_error.strerror or lanes.write_error}",
                              hint="free space where --output is (or choose another place)")
        # streamed: the records are read back one at a time, never held
        summary = summarize(iter_jsonl(records_path), num_gpus=cfg.num_gpus,
                            client=monitor.report(), time_scale=cfg.time_scale,
                            slo_ms=cfg.slo_ms, virtual_clock=cfg.virtual_lanes is not None)
        summary["run"] = {
            "url": cfg.url, "model": cfg.model, "endpoint": cfg.endpoint,
            "workload": [str(p) for p in cfg.trace] if cfg.trace else "synthetic",
            "corpus": corpus, "sessions": len(sessions),
            "max_context_tokens": cfg.max_context_tokens,
            "sessions_over_context": pool.dropped, "concurrency": cfg.concurrency,
            "duration_s": cfg.duration_s, "max_requests": cfg.max_requests,
            "warmup_requests": cfg.warmup_requests, "seed": cfg.seed, "run_marker": marker,
            # where the run busts prefix caches: its marker on every prompt's first tokens,
            # or (AgentX) the harness's marker per session tree (workload/prompt.py)
            "cache_bust": "tree" if lanes.tree_markers else "run",
            "start": cfg.start, "start_ratio": list(cfg.start_ratio), "order": cfg.order,
            "clock": "virtual" if cfg.virtual_lanes is not None else "wall",
            "warmup_per_lane": cfg.warmup_per_lane, "warmup_grace_s": cfg.warmup_grace_s,
            "think_time_cap_s": cfg.think_time_cap_s, "think_time_scale": cfg.think_time_scale,
            "system_idle_cap_s": cfg.system_idle_cap_s,
            "idle_shifts": lanes.idle.shifts if lanes.idle else 0,
            "idle_shifted_s": lanes.idle.shift_ns / 1e9 if lanes.idle else 0.0,
            "tree_idle_cap_s": cfg.tree_idle_cap_s, "tree_idle_shifts": lanes.tree_shifts,
            "tree_idle_shifted_s": lanes.tree_shifted_ns / 1e9,
            **phases(lanes, t0),
            "max_input_tokens": cfg.max_input_tokens, "ignore_eos": cfg.ignore_eos,
            "dropped_fields": sorted(lanes.factory.dropped),
            "tokenizer": cfg.tokenizer, "prompt_token_ids": token_ids,
            "time_scale": scale, "time_scale_source": scale_source,
            # only the embedded engine advertises its clock
            "embedded_engine": cfg.embedded_engine or scale_source == "server",
            "profile": cfg.profile,
            "started_unix_s": started_wall, "elapsed_s": (perf_counter_ns() - t0) / 1e9,
            "connections": counters.connections(),
            "notes": sorted(set(counters.notes) | ({vocab.switched} if vocab.switched else
                                                   set())),
            # why the run ended before its bound: None (it reached it), "interrupted", or the
            # server having stopped answering
            "stopped": INTERRUPTED if interrupted else lanes.stop_reason,
            "compressed": cfg.compress_records,
            "loop": ({"mode": "closed", "lanes": cfg.concurrency} if cfg.session_rate is None
                     else {"mode": "open", "session_rate_per_s": cfg.session_rate,
                           "arrival": cfg.arrival, "live_session_cap": cfg.concurrency,
                           "arrivals_delayed": counters.arrivals_delayed}),
        }
        if cfg.profile is not None:
            from kvbench.replay.profile import profile_named, verdict

            summary["profile"] = verdict(profile_named(cfg.profile), summary["run"],
                                         iter_jsonl(records_path), cfg.fresh_server)
        summary = redact_json(summary)  # the url, error messages: redacted by value
        write_json_atomic(out / SUMMARY_FILE, summary)
    finally:
        if sigint is not None:
            sigint()
    if interrupted:
        raise asyncio.CancelledError
    return summary


async def _run(cfg: ReplayConfig, lanes: Lanes, monitor: LoopMonitor,
               on_progress: Progress | None, t0: int,
               at_profiling_start: Callable[[], Awaitable[object]] | None = None) -> None:
    """The warm-up, then the profiling phase for its duration (counted from its own start),
    then everything they left (cancelled lanes, responses still to parse) settled."""
    # What exists now (traces, vocabulary, earlier jobs' results in a sweep) lives all run:
    # out of the collector's reach, so no full collection walks it mid-replay (one took
    # 48-60 ms in the quickstart, the loop lag that flagged its runs saturated)
    gc.freeze()
    lanes.digest.start()
    lanes.t0_ns = t0
    tasks: list[asyncio.Task] = []
    ticker = None
    if on_progress is not None:
        ticker = asyncio.create_task(_tick(on_progress, lanes.c, t0))
    try:
        lane_ids = [lanes.lane_offset + i for i in range(cfg.concurrency)]
        warm_first = cfg.session_rate is None and (cfg.start == "sampled"
                                                   or bool(cfg.warmup_per_lane))
        if cfg.session_rate is None and cfg.virtual_lanes is None and not warm_first:
            # every lane's first prompts rendered before the clock, the duration and the
            # client's self-check start: no request is sent, there is no schedule to keep
            await lanes.prepare(lane_ids)
            # the prepared contexts (1.2M blocks at 512 AgentX sessions) live until their
            # sessions' next turns replace them: out of the collector's reach too (in the
            # young generations, one collection walked them for 30-50 ms)
            gc.freeze()
            lanes.t0_ns = perf_counter_ns()
        monitor.start()
        if warm_first:
            warm = asyncio.create_task(warm_up(lanes, lane_ids))
            await _first(_done_event(warm), lanes.halted, None)
            if not warm.done():
                warm.cancel()
            await _cancel_all([warm, *lanes.stream_tasks])
            if not warm.cancelled() and warm.exception() is not None:
                raise ReplayError(f"the warm-up failed: {warm.exception()!r}"
                                  ) from warm.exception()
            if lanes.error is not None:
                raise ReplayError(f"a session stream failed: {lanes.error!r}"
                                  ) from lanes.error
            if at_profiling_start is not None and not lanes.stopping:
                await at_profiling_start()
        lanes.profiling_started_ns = perf_counter_ns()
        if cfg.duration_s is not None and cfg.virtual_lanes is None:
            # (a virtual clock's lanes check the deadline in its time: replay/lanes.py)
            lanes.deadline_ns = lanes.profiling_started_ns + int(cfg.duration_s * 1e9)
        if not lanes.stopping:
            if cfg.session_rate is not None:
                tasks = [asyncio.create_task(lanes.run_open(
                    cfg.session_rate, cfg.arrival == "poisson", cfg.seed))]
            else:
                tasks = [asyncio.create_task(lanes.run_lane(i)) for i in lane_ids]
            await _wait(tasks, cfg, lanes)
    finally:
        lanes.stopping = True
        await _cancel_all(tasks)
        await _cancel_all(list(lanes.stream_tasks))
        lanes.profiling_ended_ns = perf_counter_ns()
        if ticker is not None:
            ticker.cancel()
            on_progress(lanes.c, (perf_counter_ns() - t0) / 1e9)  # type: ignore[misc]
        await lanes.digest.drain()
        await monitor.stop()
        gc.unfreeze()


async def start_virtual(cfg: ReplayConfig) -> ReplayConfig:
    """A virtual-clock run's start at the server (replay/lockstep.py), once per run: the
    shards of a sharded one share their parent's."""
    if cfg.virtual_lanes is None or cfg.virtual_start_ns is not None:
        return cfg
    from kvbench.replay.lockstep import start_run

    start_s = await asyncio.to_thread(start_run, cfg.url, cfg.virtual_lanes)
    return cfg.model_copy(update={"virtual_start_ns": round(start_s * 1e9)})


def _done_event(task: asyncio.Task) -> asyncio.Event:
    done = asyncio.Event()
    task.add_done_callback(lambda _: done.set())
    return done


def phases(lanes: Lanes, t0: int) -> dict:
    """When the profiling phase ran, on the records' clock (perf_counter_ns), the
    preparation or warm-up before it, and the most requests in flight at once."""
    start, end = lanes.profiling_started_ns, lanes.profiling_ended_ns
    c = lanes.c
    return {"profiling_started_ns": start, "profiling_ended_ns": end,
            "deadline_ns": lanes.deadline_ns,
            # before the profiling phase: the preparation (each lane's first prompts
            # rendered, no request sent), or the warm-up
            "prepare_s": round(lanes.prepared_s, 3),
            "prepared_prompt_tokens": lanes.prepared_tokens,
            "warmup_s": (start - t0) / 1e9 - lanes.prepared_s if start else None,
            "inflight": {"max": c.max_inflight, "max_profiled": c.max_inflight_profiled,
                         "lanes": lanes.cfg.concurrency}}


async def _cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel the lanes and wait for them, cancelling again those still running after a
    moment: Python 3.11's wait_for drops a cancellation that lands as the awaited request
    completes (cpython gh-86296), and such a lane went on to sleep out its think time (the
    rest of a 20 s run, measured with 64 lanes)."""
    pending = set(tasks)
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)


def _on_sigint(lanes: Lanes) -> Callable[[], None] | None:
    """Ctrl-C through the loop's own signal handling: it ends the run as its bound would
    (lanes halted, in-flight requests recorded as cut off, the summary written); again, it
    changes nothing (the cleanup is bounded). Returns the uninstaller; None where the loop
    cannot take signals (not the main thread), and asyncio.Runner's cancelling handler stays."""
    loop = asyncio.get_running_loop()

    def handler() -> None:
        lanes.halt(INTERRUPTED)

    if sys.platform == "win32":  # its event loops take no signal handlers
        return None
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (RuntimeError, ValueError):  # not the main thread, or a closed loop
        return None
    def uninstall() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        if lanes.stop_reason == INTERRUPTED:
            quiet_after_interrupt()

    return uninstall


def quiet_after_interrupt() -> None:
    """The run is ending on the user's Ctrl-C and its summary is written: a further press
    during the last steps (the CLI's message, the exit with 130) is ignored, where the
    default handler would raise KeyboardInterrupt at whatever runs then, a weakref callback
    included ("Exception ignored in ...")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


async def _wait(tasks: list[asyncio.Task], cfg: ReplayConfig, lanes: Lanes) -> None:
    """Until every lane ends (the bound reached, in-flight requests given the grace period
    after a duration), or at once when the server is gone."""
    left = [len(tasks)]
    finished = asyncio.Event()

    def one_done(_: asyncio.Task) -> None:
        left[0] -= 1
        if not left[0]:
            finished.set()

    for t in tasks:
        t.add_done_callback(one_done)
    if not tasks:
        finished.set()
    if cfg.duration_s is None or cfg.virtual_lanes is not None:
        # a virtual clock's lanes stop themselves at its deadline; in-flight requests end as
        # fast as the engine runs them
        await _first(finished, lanes.halted, None)
    else:
        await _first(finished, lanes.halted, cfg.duration_s)
        lanes.stopping = True
        if not finished.is_set() and not lanes.halted.is_set():
            # in-flight requests may finish within the grace period; the rest are cancelled
            # and recorded as such
            await _first(finished, lanes.halted, cfg.grace_s)
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise ReplayError(f"a session lane failed: {t.exception()!r}") from t.exception()
    if lanes.error is not None:
        raise ReplayError(f"a session stream failed: {lanes.error!r}") from lanes.error


async def _first(a: asyncio.Event, b: asyncio.Event, timeout_s: float | None) -> None:
    """Return when either event is set or after `timeout_s`."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _tick(cb: Progress, counters: Counters, t0: int) -> None:
    while True:
        cb(counters, (perf_counter_ns() - t0) / 1e9)
        await asyncio.sleep(0.25)


def run_replay(config: ReplayConfig, progress: bool = False,
               sessions: list[Session] | None = None) -> dict:
    """Synchronous wrapper: runs `replay` on uvloop when available. Ctrl-C ends the run: the
    requests that finished are summarised (summary.json says `stopped: interrupted`) and
    ReplayInterrupted (exit 130) says so."""
    on_progress = None
    bar = None
    Endpoint.parse(config.url)
    if sessions is None:
        sessions = load_sessions(config)  # bad input fails here, before any progress bar
    if progress:
        from kvbench.replay.progress import ProgressBar

        bar = ProgressBar(config)
        on_progress = bar.update
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            run = replay(config, on_progress, sessions, catch_sigint=True)
            if bar is not None:
                with bar:
                    summary = runner.run(run)
            else:
                summary = runner.run(run)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C twice, or before the run
        raise _interrupted(config.output_dir) from None
    except OSError as e:
        raise ReplayError(f"replay failed: {e}") from e
    if summary["run"]["stopped"] == INTERRUPTED:
        raise _interrupted(config.output_dir)
    return summary


def _interrupted(out: Path) -> ReplayInterrupted:
    path = out / SUMMARY_FILE
    try:
        summary = read_json(path)
    except (OSError, ValueError):
        summary = None
    if not summary or (summary.get("run") or {}).get("stopped") != INTERRUPTED:
        # Ctrl-C before the first request, or a second one during the summary
        return ReplayInterrupted("replay interrupted before it could write a summary")
    req = summary["requests"]
    return ReplayInterrupted(
        f"replay interrupted after {summary['run']['elapsed_s']:.1f} s: {req['profiled']} "
        f"requests finished ({req['errors']} errors, {req['cancelled']} cut off); their "
        f"summary is in {path}")


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
