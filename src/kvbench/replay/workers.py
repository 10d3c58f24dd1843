"""One replay over several worker processes (`--workers N`): one event loop drains about a
core's worth of streams (at 1,024 paced streams its loop lagged 23 ms p99, issue 27 item 11),
so the lanes are sharded over N processes, each its own loop.

Shard i of n runs every n-th session from the i-th, its share of the lanes (numbered after the
lanes of the shards before it) and of the request and warm-up bounds, under the run's one
marker and clock scale; it writes its records incrementally into `.workers/<i>/` of the output
directory. The parent merges them into one records.jsonl and writes one summary over them;
the client's health is each worker's (a saturated worker flags the run). Ctrl-C is forwarded
to the workers, which end as their bound would; the parent then merges and summarises what
finished and the run says `stopped: interrupted`. Workers run in their own process group
(a terminal's Ctrl-C reaches the parent alone) and die with the parent (PR_SET_PDEATHSIG),
however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path
from time import perf_counter_ns

import orjson

from kvbench.errors import ReplayError, ReplayOptionError
from kvbench.files import (
    GZ_SUFFIX,
    JsonlWriter,
    iter_jsonl,
    jsonl_path,
    read_json,
    remove_own,
    write_json_atomic,
)
from kvbench.redaction import redact_json
from kvbench.replay.config import ReplayConfig
from kvbench.replay.health import CPU_LIMIT, LAG_MS_LIMIT
from kvbench.replay.lanes import Counters
from kvbench.workload import Session

SHARD_DIR = ".workers"
SPEC_FILE = "worker.json"
LOG_FILE = "worker.log"
PROGRESS_S = 0.25
# after the workers were told to stop: how long they may take to write their records
STOP_GRACE_S = 60.0
_PROGRESS_FIELDS = ("sent", "profiled_sent", "done", "errors", "out_tokens", "in_tokens",
                    "inflight")


def split(total: int | None, parts: int) -> list[int | None]:
    """`total` in `parts` shares as even as integers allow (the first ones larger)."""
    if total is None:
        return [None] * parts
    return [total // parts + (i < total % parts) for i in range(parts)]


def shard_configs(cfg: ReplayConfig, n: int, marker: str, time_scale: float,
                  root: Path) -> list[tuple[ReplayConfig, int]]:
    """Each shard's config (one process, its lanes and bounds) and its first lane number."""
    lanes = split(cfg.concurrency, n)
    requests = split(cfg.max_requests, n)
    warmups = split(cfg.warmup_requests, n)
    out, first = [], 0
    for i in range(n):
        update = {"workers": 1, "concurrency": lanes[i], "max_requests": requests[i],
                  "warmup_requests": warmups[i], "run_marker": marker, "time_scale": time_scale,
                  "output_dir": root / str(i), "profile": None}
        if cfg.session_rate is not None:  # n Poisson arrivals at rate/n are one at rate
            update.update(session_rate=cfg.session_rate / n, seed=cfg.seed + i)
        out.append((cfg.model_copy(update=update), first))
        first += lanes[i]
    return out


def check_shards(cfg: ReplayConfig, sessions: int) -> None:
    n = cfg.workers
    if n > cfg.concurrency:
        raise ReplayOptionError(f"--workers {n} is more than the {cfg.concurrency} lanes "
                                "(--concurrency): each worker needs at least one",
                                hint=f"--workers {cfg.concurrency} or fewer")
    if n > sessions:
        raise ReplayOptionError(f"--workers {n} is more than the workload's {sessions} "
                                "sessions: each worker replays its own sessions",
                                hint=f"--workers {sessions} or fewer")
    if cfg.max_requests is not None and cfg.max_requests < n:
        raise ReplayOptionError(f"--max-requests {cfg.max_requests} is fewer than --workers "
                                f"{n}: each worker needs at least one request")


class _Worker:
    def __init__(self, index: int, cfg: ReplayConfig, lane_offset: int, shards: int) -> None:
        self.index = index
        self.cfg = cfg
        self.dir = cfg.output_dir
        self.lane_offset = lane_offset
        self.shards = shards
        self.proc: asyncio.subprocess.Process | None = None
        self.progress = dict.fromkeys(_PROGRESS_FIELDS, 0)

    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        spec = {"config": self.cfg.model_dump(mode="json"), "shard": self.index,
                "shards": self.shards, "lane_offset": self.lane_offset}
        # the API key travels in the spec file only for the worker's life (removed below)
        spec_path = self.dir / SPEC_FILE
        fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(spec))
        log = open(self.dir / LOG_FILE, "wb")  # noqa: SIM115 (the child holds it)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "kvbench.replay.workers", str(spec_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
                start_new_session=True, env=_worker_env())
        finally:
            log.close()

    async def read_progress(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            with contextlib.suppress(ValueError, TypeError):
                self.progress.update(orjson.loads(line))

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def failure(self) -> str:
        try:
            tail = (self.dir / LOG_FILE).read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        return (f"replay worker {self.index} exited with status {self.proc.returncode}"
                + (f": {' / '.join(tail)}" if tail else ""))


PARENT_ENV = "KVBENCH_REPLAY_PARENT"  # the pid of the replay a worker belongs to


def _worker_env() -> dict[str, str]:
    # the workers import this kvbench (a source checkout run as PYTHONPATH=src, a relative one)
    import kvbench

    env = dict(os.environ)
    env[PARENT_ENV] = str(os.getpid())  # the worker checks it is still this process's child
    here = str(Path(kvbench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


async def replay_sharded(cfg: ReplayConfig, on_progress=None,
                         sessions: list[Session] | None = None, *,
                         catch_sigint: bool = False) -> dict:
    """`replay` over `cfg.workers` processes: the same records and one summary."""
    from kvbench.replay.clock import advertised_clock, resolve_time_scale, virtual_config
    from kvbench.replay.http import Endpoint
    from kvbench.replay.runner import (
        RECORDS_FILE,
        SUMMARY_FILE,
        load_sessions,
        quiet_after_interrupt,
        start_virtual,
    )
    from kvbench.workload.identity import identify

    Endpoint.parse(cfg.url)
    if sessions is None:
        sessions = load_sessions(cfg)
    check_shards(cfg, len(sessions))
    advertised, virtual = await asyncio.to_thread(advertised_clock, cfg.url)
    scale, scale_source = resolve_time_scale(cfg.time_scale, advertised, virtual)
    # one start for the run: every shard's lanes follow it (replay/lockstep.py)
    cfg = await start_virtual(virtual_config(cfg, virtual))
    marker = cfg.run_marker or secrets.token_hex(8)
    out = cfg.output_dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in (RECORDS_FILE, RECORDS_FILE + GZ_SUFFIX, SUMMARY_FILE):
        remove_own(out / stale)
    root = out / SHARD_DIR
    if root.is_symlink():
        raise ReplayError(f"{root} is a symlink; the replay writes its shards only into a "
                          "real directory", hint=f"remove the link: rm {root}")
    shutil.rmtree(root, ignore_errors=True)
    workers = [_Worker(i, c, first, cfg.workers) for i, (c, first) in
               enumerate(shard_configs(cfg, cfg.workers, marker, scale, root))]
    interrupted = False
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        for w in workers:
            w.signal(signal.SIGINT)

    installed = False
    if catch_sigint and sys.platform != "win32":
        with contextlib.suppress(RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
    started_wall, t0 = time.time(), perf_counter_ns()
    counters = Counters()
    corpus = None
    try:
        try:
            for w in workers:
                if interrupted:  # Ctrl-C while the workers start: start no more
                    break
                await w.start()
            # the corpus is the whole workload's (a shard sees its share): identified while
            # the workers load theirs
            corpus = await asyncio.to_thread(identify, cfg.trace, sessions, cfg.corpus)
            await _wait_workers([w for w in workers if w.proc is not None], counters,
                                on_progress, t0)
        except asyncio.CancelledError:  # the caller's timeout: the workers stop, then merge
            interrupted = True
            await _stop_workers(workers)
        # interrupted, a worker may have ended before its replay began (no summary), or
        # never started
        failed = [w for w in workers if (w.proc is None and not interrupted) or (
            w.proc is not None and w.proc.returncode != 0
            and not (interrupted and not (w.dir / SUMMARY_FILE).is_file()))]
        if failed:
            raise ReplayError("; ".join(w.failure() for w in failed if w.proc is not None)
                              or "a replay worker did not start",
                              hint=f"see {root}/<worker>/{LOG_FILE}")
        if not any((w.dir / SUMMARY_FILE).is_file() for w in workers):
            if interrupted:  # stopped before any worker's replay began: nothing to merge
                raise asyncio.CancelledError
            raise ReplayError("no replay worker wrote a summary",
                              hint=f"see {root}/<worker>/{LOG_FILE}")
        summary = _merge(cfg, workers, out, scale=scale, scale_source=scale_source,
                         marker=marker, sessions=len(sessions), corpus=corpus,
                         started_wall=started_wall,
                         elapsed_s=(perf_counter_ns() - t0) / 1e9, interrupted=interrupted)
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
            if interrupted:
                quiet_after_interrupt()
        await _stop_workers(workers)
        for w in workers:  # a worker that died before reading its spec left the API key
            (w.dir / SPEC_FILE).unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)  # the records are merged; the shards are copies
    if interrupted and not catch_sigint:
        raise asyncio.CancelledError
    return summary


async def _wait_workers(workers: list[_Worker], counters: Counters, on_progress,
                        t0: int) -> None:
    readers = [asyncio.create_task(w.read_progress()) for w in workers]
    waits = [asyncio.create_task(w.proc.wait()) for w in workers]  # type: ignore[union-attr]
    pending = set(waits)
    try:
        while pending:
            _, pending = await asyncio.wait(pending, timeout=PROGRESS_S)
            if any(t.done() and t.result() != 0 for t in waits):
                # a worker failed: the run is over; the others stop as on Ctrl-C
                for w in workers:
                    w.signal(signal.SIGINT)
            if on_progress is not None:
                for f in _PROGRESS_FIELDS:
                    setattr(counters, f, sum(w.progress[f] for w in workers))
                on_progress(counters, (perf_counter_ns() - t0) / 1e9)
        await asyncio.gather(*readers, return_exceptions=True)
    finally:
        for t in readers:
            t.cancel()


async def _stop_workers(workers: list[_Worker]) -> None:
    """Every worker ended: asked (SIGINT), then killed after STOP_GRACE_S."""
    live = [w for w in workers if w.proc is not None and w.proc.returncode is None]
    for w in live:
        w.signal(signal.SIGINT)
    for w in live:
        try:
            await asyncio.wait_for(asyncio.shield(w.proc.wait()), STOP_GRACE_S)
        except (TimeoutError, asyncio.CancelledError):
            w.signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                await w.proc.wait()


def _merge(cfg: ReplayConfig, workers: list[_Worker], out: Path, *, scale: float,
           scale_source: str, marker: str, sessions: int, corpus: dict | None,
           started_wall: float, elapsed_s: float, interrupted: bool) -> dict:
    """The shards' records in one file (a stream, one record at a time) and one summary."""
    from kvbench.replay.runner import INTERRUPTED, RECORDS_FILE, SUMMARY_FILE
    from kvbench.replay.stats import clock_waited, summarize

    records = out / (RECORDS_FILE + (GZ_SUFFIX if cfg.compress_records else ""))
    # a worker interrupted before its replay began left no summary (and no records)
    parts = [read_json(w.dir / SUMMARY_FILE) for w in workers
             if (w.dir / SUMMARY_FILE).is_file()]
    writer = JsonlWriter(records)
    try:
        for w in workers:
            if jsonl_path(w.dir / RECORDS_FILE) is not None:
                for rec in iter_jsonl(w.dir / RECORDS_FILE):
                    writer.write(rec)
    finally:
        writer.close()
    summary = summarize(iter_jsonl(records), num_gpus=cfg.num_gpus, client=None,
                        time_scale=scale, slo_ms=cfg.slo_ms)
    merged = summary["client"]
    summary["client"] = merge_client([p["client"] for p in parts],
                                     merged["send_lateness_ms_p99"], merged["reasons"])
    for key in ("send_lateness_render_ms_p99", "send_lateness_after_render_ms_p99"):
        summary["client"][key] = merged[key]  # over every record, as the whole lateness
    if cfg.virtual_lanes is not None:
        summary["client"] = clock_waited(summary["client"])
    runs = [p["run"] for p in parts]
    stopped = INTERRUPTED if interrupted else next(
        (r["stopped"] for r in runs if r.get("stopped")), None)
    summary["run"] = {
        **runs[0],
        "url": cfg.url, "workload": [str(p) for p in cfg.trace] if cfg.trace else "synthetic",
        "sessions": sessions, "corpus": corpus, "concurrency": cfg.concurrency,
        "workers": cfg.workers,
        "max_requests": cfg.max_requests, "warmup_requests": cfg.warmup_requests,
        "seed": cfg.seed, "run_marker": marker, "time_scale": scale,
        "time_scale_source": scale_source, "started_unix_s": started_wall,
        "elapsed_s": elapsed_s, "stopped": stopped,
        "connections": {k: sum(r["connections"][k] for r in runs)
                        for k in runs[0]["connections"]},
        "notes": sorted({n for r in runs for n in r["notes"]}),
        # each shard caps its own lanes' idleness: shifts add up, the clock moved by the most
        "idle_shifts": sum(r["idle_shifts"] for r in runs),
        "idle_shifted_s": max(r["idle_shifted_s"] for r in runs),
        "tree_idle_shifts": sum(r["tree_idle_shifts"] for r in runs),
        "tree_idle_shifted_s": sum(r["tree_idle_shifted_s"] for r in runs),
        # each shard warms up its own lanes, then profiles for the duration: the phase runs
        # from the first shard's start to the last one's end
        "profiling_started_ns": min((r["profiling_started_ns"] for r in runs
                                     if r.get("profiling_started_ns")), default=None),
        "profiling_ended_ns": max((r["profiling_ended_ns"] or 0 for r in runs), default=None),
        "deadline_ns": max((r["deadline_ns"] or 0 for r in runs), default=None) or None,
        "warmup_s": max((r["warmup_s"] or 0.0 for r in runs), default=None),
        "prepare_s": max((r.get("prepare_s") or 0.0 for r in runs), default=0.0),
        "prepared_prompt_tokens": sum(r.get("prepared_prompt_tokens") or 0 for r in runs),
        # each shard's most at once, added up: at most what was in flight together
        "inflight": {"max": sum(r["inflight"]["max"] for r in runs),
                     "max_profiled": sum(r["inflight"]["max_profiled"] for r in runs),
                     "lanes": cfg.concurrency, "summed_over_workers": cfg.workers},
        "dropped_fields": sorted({f for r in runs for f in r["dropped_fields"]}),
        "loop": (runs[0]["loop"] if cfg.session_rate is None else {
            **runs[0]["loop"], "session_rate_per_s": cfg.session_rate,
            "live_session_cap": cfg.concurrency,
            "arrivals_delayed": sum(r["loop"]["arrivals_delayed"] for r in runs)}),
    }
    if cfg.session_rate is None:
        summary["run"]["loop"] = {"mode": "closed", "lanes": cfg.concurrency}
    if cfg.profile is not None:
        from kvbench.replay.profile import profile_named, verdict

        summary["profile"] = verdict(profile_named(cfg.profile), summary["run"],
                                     iter_jsonl(records), cfg.fresh_server)
    summary = redact_json(summary)
    write_json_atomic(out / SUMMARY_FILE, summary)
    return summary


def merge_client(parts: list[dict], late_p99: float | None, reasons: list[str]) -> dict:
    """The client's health over its workers: each is one event loop, so each is held to the
    loop-lag and one-core CPU limits on its own (a saturated worker flags the run); send
    lateness is over every record. `cpu_cores` is the workers' sum."""
    lags = [p.get("loop_lag_ms_p99") for p in parts]
    cpus = [p.get("cpu_cores") for p in parts]
    out_reasons = list(reasons)  # send lateness, from the merged records
    for i, (lag, cpu) in enumerate(zip(lags, cpus, strict=True)):
        if lag is not None and lag > LAG_MS_LIMIT:
            out_reasons.append(f"worker {i}: event-loop lag p99 {lag:.1f} ms > "
                               f"{LAG_MS_LIMIT} ms")
        if cpu is not None and cpu > CPU_LIMIT:
            out_reasons.append(f"worker {i}: client CPU {cpu:.2f} cores > {CPU_LIMIT}")
    known_lags = [x for x in lags if x is not None]
    known_cpus = [x for x in cpus if x is not None]
    return {"loop_lag_ms_p99": max(known_lags) if known_lags else None,
            "send_lateness_ms_p99": late_p99,
            "cpu_cores": sum(known_cpus) if known_cpus else None,
            "saturated": bool(out_reasons), "reasons": out_reasons,
            "workers": [{"loop_lag_ms_p99": lag, "cpu_cores": cpu}
                        for lag, cpu in zip(lags, cpus, strict=True)]}


# -- the worker process ---------------------------------------------------------------------

def _die_with_parent() -> None:
    """SIGKILL this process when its parent exits, however (Linux; elsewhere the parent's
    SIGINT and kill on exit stand)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    # the parent may have died before the prctl: the worker was then handed to init or to a
    # subreaper (a container's init, a test runner), not necessarily pid 1
    if str(os.getppid()) != os.environ.get(PARENT_ENV, str(os.getppid())):
        os._exit(1)


def worker_main(spec_path: Path) -> int:
    from kvbench.replay.runner import _loop_factory, load_sessions, replay

    _die_with_parent()
    spec = orjson.loads(spec_path.read_bytes())
    spec_path.unlink(missing_ok=True)  # it holds the API key, if one was given
    cfg = ReplayConfig.model_validate(spec["config"])
    shard, shards = spec["shard"], spec["shards"]
    sessions = load_sessions(cfg)[shard::shards]
    out = sys.stdout.buffer

    def progress(c: Counters, _elapsed_s: float) -> None:
        out.write(orjson.dumps({f: getattr(c, f) for f in _PROGRESS_FIELDS}) + b"\n")
        out.flush()

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(replay(cfg, progress, sessions, catch_sigint=True,
                          shard=(shard, shards), lane_offset=spec["lane_offset"]))
    return 0


if __name__ == "__main__":
    try:  # a SIGINT before the replay's own handler is in place: the parent asked to stop
        raise SystemExit(worker_main(Path(sys.argv[1])))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
