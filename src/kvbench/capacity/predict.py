"""The predicted curve: for each host-tier size, the search runs the simulator (sim.simulate,
in-process, virtual time) once per probed concurrency, every probe from an empty cache: the
target's sessions in closed-loop lanes by the workload bounds at that concurrency
(`bounds_for`: AgentX's, capacity/jobs.py, unless the command set them)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable

from kvbench.capacity.curve import HostPoint, Step
from kvbench.capacity.search import search_max
from kvbench.capacity.slo import Slo, metrics_from_sim
from kvbench.capacity.target import Target, Tier
from kvbench.sim.simulate import run_sessions
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session

Progress = Callable[[HostPoint], None]
BoundsFor = Callable[[int], WorkloadBounds]


def simulate_step(target: Target, tier: Tier, sessions: list[Session], bounds_for: BoundsFor,
                  slo: Slo, concurrency: int) -> Step:
    done: list = []
    summary = run_sessions(sessions, target.costs, target.setup(tier, concurrency),
                           bounds_for(concurrency), requests=done)
    m = metrics_from_sim(concurrency, [r for r in done if not r.meta.get("is_warmup")])
    violations = slo.violations(m)
    metrics = m.to_json() | {"hit_rate": summary["hit_rate"], "duration_s":
                             summary["duration_s"]}
    return Step(concurrency=concurrency, passed=not violations, violations=violations,
                metrics=metrics)


def search_tier(target: Target, tier: Tier, sessions: list[Session], bounds_for: BoundsFor,
                slo: Slo, *, ceiling: int, hint: int = 1) -> HostPoint:
    t0 = time.perf_counter()
    steps: list[Step] = []

    def passes(c: int) -> bool:
        steps.append(simulate_step(target, tier, sessions, bounds_for, slo, c))
        return steps[-1].passed

    res = search_max(passes, ceiling=ceiling, hint=hint)
    return HostPoint(host_gb=tier.host_gb, gpu_kv_tokens=tier.gpu_kv_tokens,
                     host_kv_tokens=tier.host_kv_tokens, max_sessions=res.max_passing,
                     first_failing=res.first_failing, engine_args=tier.engine_args,
                     steps=sorted(steps, key=lambda s: s.concurrency),
                     wall_s=time.perf_counter() - t0)


def predict_curve(target: Target, sessions: list[Session], bounds_for: BoundsFor, slo: Slo,
                  host_gbs: list[float], *, ceiling: int, on_point: Progress | None = None,
                  workers: int = 1) -> list[HostPoint]:
    """Sizes in ascending order; each search starts from the previous size's answer (a host
    tier only adds hits in the simulator, so the answer rarely drops; the gallop checks it
    rather than trusting it). `workers` > 1: the sizes in that many interleaved chains, one
    process each (forked: they share the sessions), each chain hinting from its own previous
    size: a few more probes, and where passing is not monotone in sessions a search from
    another hint can stop at another local maximum (every probe is listed either way)."""
    sizes = sorted(host_gbs)
    for gb in sizes:
        target.tier(gb)  # the planner sizes (or refuses) every point here, once
    if workers > 1 and len(sizes) > 1 and "fork" in multiprocessing.get_all_start_methods():
        return _parallel(target, sessions, bounds_for, slo, sizes, ceiling, on_point,
                         min(workers, len(sizes)))
    return _chain(target, sessions, bounds_for, slo, sizes, ceiling, on_point)


def _chain(target: Target, sessions: list[Session], bounds_for: BoundsFor, slo: Slo,
           sizes: list[float], ceiling: int, on_point: Progress | None) -> list[HostPoint]:
    points: list[HostPoint] = []
    hint = 1
    for gb in sizes:
        point = search_tier(target, target.tier(gb), sessions, bounds_for, slo,
                            ceiling=ceiling, hint=hint)
        points.append(point)
        hint = max(point.max_sessions, 1)
        if on_point is not None:
            on_point(point)
    return points


# what the forked workers of `_parallel` read (set before the fork, never pickled)
_FORKED: dict = {}


def _forked_chain(sizes: list[float]) -> list[HostPoint]:
    f = _FORKED
    return _chain(f["target"], f["sessions"], f["bounds_for"], f["slo"], sizes, f["ceiling"],
                  None)


def _parallel(target: Target, sessions: list[Session], bounds_for: BoundsFor, slo: Slo,
              sizes: list[float], ceiling: int, on_point: Progress | None,
              workers: int) -> list[HostPoint]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    _FORKED.update(target=target, sessions=sessions, bounds_for=bounds_for, slo=slo,
                   ceiling=ceiling)
    chains = [sizes[i::workers] for i in range(workers)]
    points: list[HostPoint] = []
    try:
        with ProcessPoolExecutor(workers,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            for done in as_completed([pool.submit(_forked_chain, c) for c in chains]):
                for point in done.result():
                    points.append(point)
                    if on_point is not None:
                        on_point(point)
    finally:
        _FORKED.clear()
    return sorted(points, key=lambda p: p.host_gb)
