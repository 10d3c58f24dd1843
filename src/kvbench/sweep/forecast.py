"""How long the embedded engine takes to serve a job's replay, in its own clock, before the
job runs: the job simulated in virtual time (milliseconds of CPU) with the tiers the planner
gives its server and the workload bounds its replay sends.

The quickstart's pace needs the sweep's replay time at a time scale. A probe of the heaviest
point measures the client; extrapolating its per-request time to all eighteen jobs counted
every job as heavy as the probe (its resident conc-8 arm runs 2.3x longer in the engine's clock
than the others), so the budget asked for a faster clock than the minute needs. The engine is
a simulator: it can say how long each job takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def engine_seconds(job: Any, options: Any, runners: Any = None,
                   sessions: list | None = None) -> float | None:
    """The engine-clock seconds from the first request to the last token of `job`'s replay
    under `options` (sweep.RunOptions) on the embedded engine; None when the job is not the
    embedded engine's or its plan is refused (the job will say why when it runs)."""
    from kvbench.engines import get_adapter
    from kvbench.errors import KvbenchError
    from kvbench.plan import plan_job
    from kvbench.replay.config import ReplayConfig
    from kvbench.replay.runner import load_sessions
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.sim.engine_profile import engine_profile_for
    from kvbench.sim.simulate import SimSetup, run_sessions
    from kvbench.sim.sizing import resolve_costs

    if job.framework != "sim" or job.is_multinode:
        return None
    try:
        plan = plan_job(job, runners)
        # the server's own settings, as the adapter starts it (engines/data/sim.yaml)
        launch = get_adapter("sim").build(job, plan, port=1)
    except KvbenchError:
        return None
    if plan.errors or plan.gpu_kv_tokens <= 0:
        return None
    given = {s.flag: s.value for s in launch.sources}
    costs = resolve_costs(job.model, plan.hardware, int(job.row["tp"]), job.precision,
                          kv_dtype=plan.kv_dtype, engine=engine_profile_for(job.framework))
    setup = SimSetup(plan.gpu_kv_tokens, plan.host_kv_tokens,
                     given.get("--write-policy", "write_through"), engine=EngineConfig(
                         max_running_requests=int(given["--max-running-requests"])))
    # the replay the job will send, against the server it will start (nothing is written)
    paths = options.trace_paths()
    cfg = ReplayConfig(
        url=launch.base_url, model=launch.served_model_name, output_dir=Path(), trace=paths,
        **options.for_row(job.row).replay_workload(job.conc, float(job.row.get("duration", 0))))
    bounds = cfg.bounds
    if sessions is None:
        # the sessions the replay loads or draws (synthetic: the same seeded draw)
        sessions = load_sessions(cfg)
    try:
        summary = run_sessions(sessions, costs, setup, bounds)
    except KvbenchError:
        return None
    return float(summary["duration_s"])
