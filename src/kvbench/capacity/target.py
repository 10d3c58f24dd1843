"""What is being sized: a cost model plus, for each host-tier size, the device and host pools
in tokens and the flags that configure that size.

From a recipe row, every size goes through the planner (the row with
`kv-offload-backend.size-gb-per-rank` set), so the tokens and flags are exactly what
`kvbench plan` would give that row; 0 GB is the row's GPU-resident twin (kv-offloading none:
its device pool may be larger, as the planner sizes it). Without a recipe (model, hardware,
tp, engine profile) the simulator's own sizing applies and the flags are serve-sim's."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from kvbench.errors import CapacityError, KvbenchError
from kvbench.sim.cache import WRITE_POLICIES
from kvbench.sim.costs import CostModel
from kvbench.sim.engine import EngineConfig

_GB = 1e9


@dataclass(frozen=True, slots=True)
class Tier:
    host_gb: float
    gpu_kv_tokens: int
    host_kv_tokens: int
    write_policy: str
    engine_args: list[str] = field(default_factory=list)
    plan: dict | None = None  # plan.json of this size (recipe targets)


@dataclass(slots=True)
class Target:
    label: str
    costs: CostModel
    budget_gb: float  # host-tier size per rank the grid goes up to
    engine: EngineConfig
    describe: dict[str, Any]
    job: Any | None = None  # matrix Job (recipe targets)
    runners: Any | None = None
    # Device KV tokens per rank the planner cannot see: a row whose engine arguments cap the
    # GPU pool (vLLM --kv-cache-memory-bytes, SGLang --max-total-tokens) is sized by them.
    gpu_tokens: int | None = None
    # DP attention: attention ranks (each its own pools) behind the row's router
    ranks: int = 1
    router: str = "round_robin"
    model_prefix: str | None = None  # the row's model family (its corpus variant)
    _tiers: dict[float, Tier] = field(default_factory=dict)
    _direct: dict[str, Any] = field(default_factory=dict)

    def tier(self, host_gb: float) -> Tier:
        if host_gb not in self._tiers:
            self._tiers[host_gb] = (_planned_tier(self, host_gb) if self.job is not None
                                    else _direct_tier(self, host_gb))
        return self._tiers[host_gb]

    def setup(self, tier: Tier, concurrency: int):
        """The simulator's setup of this target at a size and concurrency."""
        from kvbench.sim.simulate import SimSetup

        return SimSetup(tier.gpu_kv_tokens, tier.host_kv_tokens, tier.write_policy,
                        concurrency, self.engine, dp=self.ranks, router=self.router)

    @property
    def engine_name(self) -> str:
        """The server's engine, whose /metrics adapter a measured step scrapes with."""
        return str(self.describe.get("framework", "sim"))

    def planned_tier(self) -> Tier:
        """The row as written (the planner's own size for its budget)."""
        plan = _plan(self.job, self.job.row, self.runners)
        top = configured_gb(plan)
        return Tier(top, self.gpu_tokens or plan.gpu_kv_tokens, plan.host_kv_tokens,
                    _write_policy(plan), list(plan.engine_args),
                    _plan_json(plan, self.gpu_tokens))

    def row_for(self, host_gb: float, conc: int) -> dict:
        """The matrix row a measured step at this size and concurrency reports."""
        if self.job is not None:
            row = _row_at(self.job.row, host_gb)
        else:
            d = self._direct
            row = {"model": d["model"], "framework": d["engine"], "runner": d["hardware"],
                   "tp": d["tp"], "precision": d["precision"],
                   "kv-offloading": "dram" if host_gb else "none"}
        row["conc"] = conc
        row["exp-name"] = f"{self.label}_host{host_gb:g}gb_conc{conc}"
        return row


def configured_gb(plan: Any) -> float:
    """The host size per rank as the row configures it (the grid's unit): each pool's share of
    the configured size where the sizer knows it, else its bytes. vLLM 0.26's native pool
    pins 38.65 GB for a 24 GB size; its point on the grid is 24."""
    return sum(p.bytes_per_rank / _GB if p.configured_gb is None else p.configured_gb
               for p in plan.host_pools if p.inside_configured_size)


def _write_policy(plan: Any) -> str:
    """The simulator's write policy for the plan's server (SGLang's default without one)."""
    policy = plan.hicache_write_policy
    return policy if policy in WRITE_POLICIES else "write_through"


def _row_at(row: dict, host_gb: float) -> dict:
    out = copy.deepcopy(row)
    if host_gb == 0:
        out["kv-offloading"] = "none"
        out.pop("kv-offload-backend", None)
    else:
        backend = dict(out.get("kv-offload-backend") or {})
        backend["size-gb-per-rank"] = host_gb
        out["kv-offload-backend"] = backend
    return out


def _plan(job: Any, row: dict, runners: Any):
    from kvbench.matrix import Job
    from kvbench.plan import plan_job

    # capacity proposes pools for new arms: the planner's budget sizing, not a launcher's
    return plan_job(Job(config_key=job.config_key, row=row, scenario=job.scenario), runners,
                    sizing="budget")


def _accepted(job: Any, runners: Any, host_gb: float) -> bool:
    plan = _plan(job, _row_at(job.row, host_gb), runners)
    return not plan.errors and plan.within_budget


def _accepted_top(job: Any, runners: Any, top: float) -> float:
    """The grid's top: the row's own host size when the planner accepts it as an explicit
    size, else the largest whole GB below it that it accepts (a row sized automatically can
    be larger than what an explicit --hicache-size of the same GB leaves room for: the pools
    outside the configured size count on top of it)."""
    if top <= 0 or _accepted(job, runners, top):
        return top
    lo, hi = 0, int(top)  # lo accepted (0 GB: no host tier), hi refused
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _accepted(job, runners, mid) else (lo, mid)
    return float(lo)


def _planned_tier(t: Target, host_gb: float) -> Tier:
    plan = _plan(t.job, _row_at(t.job.row, host_gb), t.runners)
    if plan.errors or not plan.within_budget:
        raise CapacityError(
            f"{t.label}: the planner refuses host {host_gb:g} GB per rank: "
            f"{'; '.join(plan.errors) or 'over the host budget'}",
            hint="lower --host-gb or the grid's top (--budget-gb)")
    return Tier(host_gb, t.gpu_tokens or plan.gpu_kv_tokens, plan.host_kv_tokens if host_gb else 0,
                _write_policy(plan), list(plan.engine_args),
                _plan_json(plan, t.gpu_tokens))


def _plan_json(plan: Any, gpu_tokens: int | None) -> dict:
    """plan.json of a size, with the device pool the target really has."""
    out = plan.to_json()
    if gpu_tokens:
        out["gpu-kv-tokens"] = gpu_tokens
        out["arithmetic"] = [*out.get("arithmetic", []), f"GPU KV tokens per rank: "
                             f"{gpu_tokens:,} from --gpu-tokens (the planner's HBM estimate "
                             f"was {plan.gpu_kv_tokens:,})"]
    return out


def _direct_tier(t: Target, host_gb: float) -> Tier:
    from kvbench.sim.sizing import host_tier_tokens

    d = t._direct
    args = ["--gpu-tokens", str(d["gpu_tokens"])]
    if host_gb:
        args += ["--host-cache-gb", f"{host_gb:g}", "--write-policy", d["write_policy"]]
    return Tier(host_gb, d["gpu_tokens"], host_tier_tokens(t.costs, host_gb),
                d["write_policy"], args)


def target_from_job(job: Any, runners: Any = None, engine: EngineConfig | None = None,
                    gpu_tokens: int | None = None) -> Target:
    """A recipe row with a host tier (kv-offloading other than none); the grid's top is the
    host size the planner picks for the row's budget. `gpu_tokens` replaces the planner's
    device pool (HBM x utilisation - weights) when the server's arguments cap it."""
    from dataclasses import replace

    from kvbench.capacity.jobs import model_job, model_prefix
    from kvbench.sim.engine_profile import engine_profile_for

    if job.is_multinode:
        raise CapacityError(f"{job.exp_name}: multi-node rows are not simulated")
    if job.kv_offloading == "none" or not job.offload_backend:
        raise CapacityError(
            f"{job.exp_name}: kv-offloading is {job.kv_offloading!r}: a capacity curve needs "
            "a row with a host tier", hint="select a row with kv-offloading: dram")
    plan = _plan(job, job.row, runners)
    if plan.errors or not plan.within_budget:
        raise CapacityError(f"{job.exp_name}: the planner refuses the row: "
                            f"{'; '.join(plan.errors) or 'over the host budget'}")
    if gpu_tokens is not None and gpu_tokens < 1:
        raise CapacityError(f"--gpu-tokens must be >= 1, got {gpu_tokens}")
    own = configured_gb(plan)
    top = _accepted_top(job, runners, own)
    profile = engine_profile_for(job.framework)
    # the row as simulate-jobs models it: its engine's costs and KV manager, its DP ranks
    try:
        m = model_job(job, plan)
    except KvbenchError as e:
        raise CapacityError(f"{job.exp_name}: cannot model the row: {e.message}") from None
    if engine is not None:
        m_engine = replace(m.engine, max_running_requests=engine.max_running_requests,
                           chunked_prefill_tokens=engine.chunked_prefill_tokens)
    else:
        m_engine = m.engine
    label = str(job.row.get("exp-name", job.config_key)).replace(f"_conc{job.conc}", "")
    # to 0.1 GB, down where rounding up names a size the planner refuses (148.955 -> 149.0)
    shown = round(top, 1)
    if shown > top and not _accepted(job, runners, shown):
        shown = math.floor(top * 10) / 10
    top = shown
    return Target(
        label=label, costs=m.costs, budget_gb=top, engine=m_engine, job=job, runners=runners,
        gpu_tokens=gpu_tokens, ranks=m.ranks, router=m.router, model_prefix=model_prefix(job),
        describe={"config-key": job.config_key, "model": job.model, "hardware": plan.hardware,
                  "framework": job.framework, "engine-profile": profile or "sglang",
                  "tp": int(job.row["tp"]), "precision": job.precision,
                  "attention-ranks": m.ranks, "router": m.router,
                  "backend": plan.backend, "budget-gb-node": plan.budget_gb,
                  "ranks-on-node": plan.ranks_on_node, "host-gb-per-rank-max": top,
                  "host-gb-per-rank-row": round(own, 1),
                  "gpu-kv-tokens": gpu_tokens or plan.gpu_kv_tokens,
                  "gpu-kv-tokens-from": "--gpu-tokens" if gpu_tokens else "planner"})


def offload_rows(jobs: list) -> list:
    """The distinct single-node rows with a host tier, one job each (the rows of one key
    differ in more than conc: tp, ep, spec decoding, ...); first-seen order."""
    rows: dict[str, Any] = {}
    for job in jobs:
        if job.kv_offloading == "none" or job.is_multinode:
            continue
        key = repr(sorted((k, repr(v)) for k, v in job.row.items()
                          if k not in ("conc", "exp-name")))
        rows.setdefault(key, job)
    return list(rows.values())


def target_direct(model: str, hardware: str, tp: int, *, precision: str | None,
                  engine_profile: str, budget_gb: float, gpu_tokens: int | None,
                  write_policy: str, engine: EngineConfig | None = None) -> Target:
    from kvbench.sim.sizing import gpu_tier_tokens, infer_precision, resolve_costs

    if budget_gb < 0:
        raise CapacityError(f"--budget-gb must be >= 0, got {budget_gb:g}")
    if write_policy not in WRITE_POLICIES:
        raise CapacityError(f"--write-policy: {write_policy!r} is not one of "
                            f"{', '.join(WRITE_POLICIES)}")
    costs = resolve_costs(model, hardware, tp, precision, engine=engine_profile)
    gpu = gpu_tokens if gpu_tokens is not None else gpu_tier_tokens(costs, hardware)
    precision = precision or infer_precision(model)
    t = Target(label=f"{model.split('/')[-1].lower()}_{hardware}_tp{tp}", costs=costs,
               budget_gb=budget_gb, engine=engine or EngineConfig(),
               describe={"model": model, "hardware": hardware, "engine-profile": engine_profile,
                         "tp": tp, "precision": precision, "gpu-kv-tokens": gpu,
                         "write-policy": write_policy, "host-gb-per-rank-max": budget_gb})
    t._direct = {"model": model, "hardware": hardware, "tp": tp, "precision": precision,
                 "engine": "sim", "gpu_tokens": gpu, "write_policy": write_policy}
    return t
