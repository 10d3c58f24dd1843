"""The predicted curve: for each host-tier size, the search runs the simulator (sim.simulate,
in-process, virtual time) once per probed concurrency, every probe from an empty cache: the
target's sessions in closed-loop lanes by the workload bounds at that concurrency
(`bounds_for`: AgentX's, capacity/jobs.py, unless the command set them)."""

from __future__ import annotations

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
                  host_gbs: list[float], *, ceiling: int, on_point: Progress | None = None
                  ) -> list[HostPoint]:
    """Sizes in ascending order; each search starts from the previous size's answer (a host
    tier only adds hits in the simulator, so the answer rarely drops; the gallop checks it
    rather than trusting it)."""
    points: list[HostPoint] = []
    hint = 1
    for gb in sorted(host_gbs):
        point = search_tier(target, target.tier(gb), sessions, bounds_for, slo,
                            ceiling=ceiling, hint=hint)
        points.append(point)
        hint = max(point.max_sessions, 1)
        if on_point is not None:
            on_point(point)
    return points
