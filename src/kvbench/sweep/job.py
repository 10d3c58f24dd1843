"""One job, end to end: plan -> launch -> wait ready -> replay with scraping -> stop ->
result. Every failure becomes a result with the phase that failed and the reason (failures
are data); result.json is written last, so its presence means the job finished."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchError, LaunchError, SweepError
from kvbench.files import GZ_SUFFIX, inside, jsonl_path, write_atomic, write_json_atomic
from kvbench.sweep import layout
from kvbench.sweep.events import JobEvents, JobOutcome, NullEvents
from kvbench.sweep.spec import JobSpec

REPLAY_MARGIN_S = 300.0
NO_DURATION_REPLAY_S = 7200.0


class PhaseFailure(SweepError):
    def __init__(self, phase: str, message: str, *, details: dict | None = None) -> None:
        super().__init__(f"{phase}: {message}")
        self.phase = phase
        self.reason = message
        self.details = details or {}


# A job's other ports are offsets from its base port (engines/data/*.yaml and services: engine
# +1, dist-init +2000, router metrics +10000, Mooncake master +12000, LMCache servers +13000 and
# +14000, one port per rank up to 64); the base is drawn where every one of them stays below
# 65536 (an OS-assigned port near 61000 would overflow).
PORT_SPAN = 14_064
PORT_LOW = 10_000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The OS's range for outgoing connections' source ports (Linux; None where unreadable)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def base_port_windows(span: int = PORT_SPAN, ephemeral: tuple[int, int] | None = None
                      ) -> list[range]:
    """Where a base port may be drawn so that the base and its derived ports stay out of the
    ephemeral range. A readiness probe to a port in that range before the server listens can
    be given that very port as its own source: TCP's simultaneous open then connects the
    socket to itself, the probe reads its own "GET /health" back (http.client.BadStatusLine)
    and the socket holds the port the server is about to bind. Falls back to the whole span
    when the ephemeral range leaves no room."""
    whole = range(PORT_LOW, 65_536 - span)
    if ephemeral is None:
        return [whole]
    low, high = ephemeral
    windows = [range(PORT_LOW, low - span), range(high + 1, 65_536 - span)]
    windows = [w for w in windows if len(w) > 0]
    return windows or [whole]


def free_port(host: str = "127.0.0.1", span: int = PORT_SPAN) -> int:
    """A free base port whose derived ports fit outside the ephemeral range where it can;
    the base and base + 1 are checked free."""
    import random

    rng = random.SystemRandom()
    windows = base_port_windows(span, ephemeral_range())
    weights = [len(w) for w in windows]
    for _ in range(500):
        window = rng.choices(windows, weights)[0]
        base = rng.randrange(window.start, window.stop)
        if _bindable(host, base) and _bindable(host, base + 1):
            return base
    spans = ", ".join(f"{w.start}..{w.stop - 1}" for w in windows)
    raise SweepError(f"no free port pair on {host} in {spans}")


def server_env(env: dict[str, str]) -> dict[str, str]:
    """The server's extra environment. Servers run in the job directory, so relative
    PYTHONPATH entries (a source checkout run as PYTHONPATH=src) are made absolute."""
    inherited = os.environ.get("PYTHONPATH")
    if "PYTHONPATH" in env or not inherited:
        return dict(env)
    parts = [str(Path(p).resolve()) if p else p for p in inherited.split(os.pathsep)]
    return {**env, "PYTHONPATH": os.pathsep.join(parts)}


def _ready_poll_s(row: dict) -> float:
    # The embedded engine is up in well under a second and the quickstart runs 18 of them:
    # half a second of polling slack each is a tenth of its minute. Real engines load for
    # minutes; their health endpoints are polled at the launcher's default.
    return 0.05 if row.get("framework") == "sim" else 0.5


def replay_timeout_s(cfg: Any) -> float:
    """How long a job's replay (a ReplayConfig) may take by default: its warm-up's grace (a
    validity profile's: AgentX gives the warm-up 1800 s before the profiling phase), the
    phase, the grace for requests in flight, and a margin; without a duration, two hours."""
    if not cfg.duration_s:
        return NO_DURATION_REPLAY_S
    return (cfg.warmup_grace_s or 0.0) + cfg.duration_s + cfg.grace_s + REPLAY_MARGIN_S


def _reason(e: BaseException) -> str:
    if isinstance(e, KvbenchError):
        return e.message
    return f"{type(e).__name__}: {e}"


class _Run:
    """The state of one attempt, so a failure in any phase can still write its result."""

    def __init__(self, spec: JobSpec, job_dir: Path, events: JobEvents) -> None:
        self.spec = spec
        self.job_dir = job_dir
        self.events = events
        self.plan_json: dict | None = None
        self.summary: dict | None = None
        self.server: dict | None = None
        self.telemetry: dict | None = None
        self.engine = spec.row.get("framework", "")
        self.warnings: list[str] = []
        self.patches: list[dict] | None = None  # engine-image patches, as applied
        self.phase: str | None = None  # multi-node rows: the phase reached

    # -- phases -----------------------------------------------------------------------------
    def plan(self):
        from kvbench.plan import plan_job

        runners = None
        if self.spec.runner_config:
            from kvbench.recipe import load_runners

            runners = load_runners(Path(self.spec.runner_config))
        options = self.spec.options
        plan = plan_job(self.spec.job(), runners, sizing=options.sizing, force=options.force,
                        engine_args=options.engine_args)
        self.plan_json = plan.to_json()
        write_json_atomic(self.job_dir / layout.PLAN_FILE, self.plan_json)
        if not plan.accepted:
            raise PhaseFailure("plan", "; ".join(plan.errors) or "plan exceeds the host budget")
        self.warnings += list(plan.warnings)
        return plan

    def plan_workers(self) -> dict:
        """A multi-node row: one plan per worker (its own parallelism and role), each in
        plan.json under `workers`; any refusal refuses the job."""
        from kvbench.matrix import Job
        from kvbench.plan import plan_job
        from kvbench.sweep.workers import workers_of

        runners = None
        if self.spec.runner_config:
            from kvbench.recipe import load_runners

            runners = load_runners(Path(self.spec.runner_config))
        plans, records, refused = {}, [], []
        for w in workers_of(self.spec.row):
            plan = plan_job(Job(self.spec.config_key, w.row, self.spec.scenario), runners,
                            sizing=self.spec.options.sizing, force=self.spec.options.force)
            plans[w.name] = plan
            records.append({"worker": w.name, "role": w.role, "plan": plan.to_json()})
            if not plan.accepted:
                refused.append(f"{w.name}: {'; '.join(plan.errors) or 'exceeds the budget'}")
        self.plan_json = {**(self.plan_json or {}), "workers": records}
        # each worker's own plan replaces the row-level one's caveats (sized for prefill only)
        self.warnings = [f"{name}: {w}" for name, plan in plans.items() for w in plan.warnings]
        write_json_atomic(self.job_dir / layout.PLAN_FILE, self.plan_json)
        if refused:
            raise PhaseFailure("plan", "; ".join(refused))
        return plans

    def launch_spec(self, plan):
        from kvbench.engines import get_adapter

        adapter = get_adapter(self.spec.row["framework"])
        opts = self.spec.options
        launch = adapter.build(self.spec.job(), plan, port=free_port(),
                               model_path=opts.model_path, work_dir=self.job_dir,
                               dummy_weights=opts.load_format == "dummy")
        for name, content in launch.files.items():
            write_atomic(self.job_dir / name, content)
        return launch

    def _embedded(self) -> bool:
        """Whether kvbench's embedded engine serves: the row's own engine, or standing in for
        the row's (--stand-in sim)."""
        from kvbench.plan.topology import EMBEDDED_FRAMEWORK

        return EMBEDDED_FRAMEWORK in (self.spec.row.get("framework"), self.spec.options.stand_in)

    def _time_scale(self, job) -> float | None:
        """The server's clock scale when the replay cannot read it from the server: embedded
        workers behind a router (sweep/multinode.py); None: the replay's handshake says."""
        opts = self.spec.options
        if job.is_multinode and self._embedded():
            from kvbench.sweep.multinode import routed_time_scale

            return routed_time_scale(opts)
        return opts.time_scale

    async def measure(self, launch) -> None:
        from kvbench.metrics import Scraper
        from kvbench.replay import ReplayConfig, replay
        from kvbench.telemetry import GpuSampler

        opts = self.spec.options
        job = self.spec.job()
        cfg = ReplayConfig(
            url=launch.base_url, model=launch.served_model_name, endpoint=opts.endpoint,
            trace=opts.trace_paths(),
            **opts.replay_workload(job.conc, float(self.spec.row.get("duration", 0)),
                                   self.spec.repeat),
            workers=min(opts.replay_workers, job.conc),
            correlation_header=launch.correlation_header, output_dir=self.job_dir,
            tokenizer=opts.prompt_tokenizer, num_gpus=job.gpus,
            time_scale=self._time_scale(job), compress_records=opts.compress_raw,
            embedded_engine=self._embedded(),
            # a multi-node row's launch is the router's endpoint: embedded workers report all
            absent_cached_tokens_are_zero=getattr(launch, "absent_cached_tokens_are_zero", False),
        )
        timeout = opts.timeouts.replay_s or replay_timeout_s(cfg)
        scrape = layout.SCRAPE_FILE + (GZ_SUFFIX if opts.compress_raw else "")
        scraper = Scraper(launch.metrics_url, self.engine, self.job_dir / scrape,
                          interval_s=opts.scrape_interval_s)
        sampler = GpuSampler(interval_s=opts.scrape_interval_s,
                             out_path=self.job_dir / layout.TELEMETRY_FILE)
        await scraper.start()
        sampler.start()
        try:
            self.summary = await asyncio.wait_for(
                replay(cfg, self.events.replay_progress,
                       at_profiling_start=scraper.mark_profiling_start), timeout)
        except TimeoutError:
            raise PhaseFailure("replay", f"replay did not finish within {timeout:.0f} s") from None
        finally:
            self.telemetry = sampler.stop()
            await scraper.stop()
        if (stopped := self.summary["run"].get("stopped")) is not None:
            raise PhaseFailure("replay", f"the replay stopped early: {stopped}")

    def summarize_server(self) -> None:
        from kvbench.metrics import profiling_start_unix_ns, summarize_scrape

        path = self.job_dir / layout.SCRAPE_FILE
        if jsonl_path(path) is not None:  # scrape.jsonl or scrape.jsonl.gz
            self.server = summarize_scrape(path, self.engine,
                                           profiling_start_unix_ns(self.summary))

    # -- result -----------------------------------------------------------------------------
    def write_result(self, status: str, failure: dict | None) -> Path:
        from kvbench.results import build_result, write_result

        result = build_result(
            job_row=self.spec.row, config_key=self.spec.config_key, plan=self.plan_json,
            summary=self.summary, server=self.server, telemetry=self.telemetry, status=status,
            failure=failure, warnings=self.warnings, fingerprint=self.spec.fingerprint,
            repeat=self.spec.repeat, engine_patches=self.patches,
            options_id=self.spec.options.options_id(),
            run_options=self.spec.options.measurement_identity(),
        )
        return write_result(self.job_dir, result)


def _run_multinode(run: _Run, events: JobEvents) -> str:
    """Workers (each planned), router, replay; returns the phase reached."""
    from kvbench.sweep.multinode import serve_workers

    plans = run.plan_workers()
    run.phase = "launch"
    events.phase("launch")
    with serve_workers(run, plans, free_port, server_env) as endpoint:
        run.patches = [{**p, "worker": w["name"]} for w in endpoint.workers
                       for p in w["patches"]] or None
        write_json_atomic(run.job_dir / "workers.json", endpoint.workers)
        run.phase = "replay"
        events.phase("replay")
        asyncio.run(run.measure(endpoint))
        run.phase = "stop"
        events.phase("stop")
    return "result"


def _finish(run: _Run, t0: float, phase: str) -> JobOutcome:
    run.events.phase(phase)
    run.summarize_server()
    path = run.write_result("ok", None)
    from kvbench.files import read_json

    data = read_json(path)
    failure = data.get("failure") or {}
    return JobOutcome(run.spec.dir_name, data["status"], phase=failure.get("stage"),
                      reason=failure.get("reason"), elapsed_s=time.monotonic() - t0,
                      result_path=str(path))


def run_job(spec: JobSpec, results_dir: Path, events: JobEvents | None = None) -> JobOutcome:
    """Run one job into `results_dir/<spec.dir_name>/`; never raises for a job failure (the
    failure is returned and written as a result), only for KeyboardInterrupt."""
    events = events or NullEvents()
    t0 = time.monotonic()
    job_dir = Path(results_dir) / spec.dir_name
    if not inside(job_dir, results_dir) or Path(job_dir).resolve() == Path(results_dir).resolve():
        # resume deletes an attempt's files: never anywhere but a job directory in --results
        raise SweepError(f"job directory {job_dir} is not inside the results directory "
                         f"{results_dir}", hint="is the job directory a symlink?")
    job_dir.mkdir(parents=True, exist_ok=True)
    layout.clear_attempt(job_dir)
    from kvbench.sweep.multinode import clear_workers

    clear_workers(job_dir)
    spec.write(job_dir / layout.JOB_FILE)
    run = _Run(spec, job_dir, events)
    phase = "plan"
    try:
        events.phase(phase)
        plan = run.plan()
        if spec.job().is_multinode:
            phase = "launch"
            return _finish(run, t0, _run_multinode(run, events))
        phase = "launch"
        events.phase(phase)
        launch = run.launch_spec(plan)
        from kvbench.launch import ServerProcess

        argv = [*launch.argv, *spec.options.engine_args]
        server = ServerProcess(argv, env=server_env(launch.env), log_path=job_dir / layout.LOG_FILE,
                               ready_url=launch.health_url,
                               ready_timeout_s=spec.options.timeouts.ready_s, cwd=job_dir,
                               poll_interval_s=_ready_poll_s(spec.row),
                               patches=launch.image_mods,
                               skip_patches=spec.options.skip_image_mods)
        with server:
            run.patches = server.patch_outcomes
            phase = "ready"
            events.phase(phase)
            server.wait_ready()
            phase = "replay"
            events.phase(phase)
            asyncio.run(run.measure(launch))
            phase = "stop"
            events.phase(phase)
        phase = "result"
        return _finish(run, t0, phase)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # any failure of the job becomes its result
        failed_phase = e.phase if isinstance(e, PhaseFailure) else (run.phase or phase)
        failure: dict[str, Any] = {"stage": failed_phase, "reason": _reason(e)}
        if isinstance(e, LaunchError) and hasattr(e, "to_json"):
            failure["launch"] = e.to_json()
        if not isinstance(e, KvbenchError):
            failure["traceback"] = traceback.format_exc(limit=8).splitlines()[-12:]
        try:
            run.summarize_server()
        except Exception as scrape_error:  # the failure above is what matters
            run.warnings.append(f"scrape summary failed: {_reason(scrape_error)}")
        try:
            path = run.write_result("failed", failure)
        except Exception as result_error:  # no result.json: the job simply runs again
            return JobOutcome(spec.dir_name, "failed", phase=failed_phase,
                              reason=f"{failure['reason']} (and its result could not be "
                                     f"written: {_reason(result_error)})",
                              elapsed_s=time.monotonic() - t0)
        return JobOutcome(spec.dir_name, "failed", phase=failed_phase, reason=failure["reason"],
                          elapsed_s=time.monotonic() - t0, result_path=str(path))
