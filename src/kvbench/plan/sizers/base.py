"""The sizer interface and what every offload backend shares: fit a knob to the budget.

A sizer turns a job's budget into (a) host pools per rank, (b) the engine flags, env and config
fragments that make the engine allocate exactly those pools, and (c) the arithmetic. It never
decides whether the plan is accepted: the planner projects the node footprint and refuses."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvbench.models import KvPool, ModelProfile
from kvbench.plan.footprint import largest_fitting, per_rank_bytes
from kvbench.plan.gpu import GpuEstimate
from kvbench.plan.launcher_sizing import LauncherSize
from kvbench.plan.plan import HostPool
from kvbench.plan.topology import Topology
from kvbench.plan.version import ImageVersion
from kvbench.plan.vllm_kv import VllmKvLayout
from kvbench.units import GB


@dataclass(frozen=True, slots=True)
class SizingContext:
    topo: Topology
    model: ModelProfile
    kv_dtype: str
    pools: list[KvPool]
    ranks_on_node: int
    budget_bytes: int
    gpu: GpuEstimate
    page_size_tokens: int
    version: ImageVersion
    # HiCache write-policy / io-backend / mem-layout the recipe runs (plan/settings.py)
    hicache_options: dict[str, str] = field(default_factory=dict)
    # --sizing launcher: the launcher's value, taken as is (the planner judges the result)
    launcher: LauncherSize | None = None
    # vLLM's block layout (plan/vllm_kv.py): its CPU pools are counted in its blocks
    vllm_layout: VllmKvLayout | None = None

    @property
    def per_rank_budget_bytes(self) -> int:
        return self.budget_bytes // self.ranks_on_node

    def pool(self, name: str) -> KvPool | None:
        return next((p for p in self.pools if p.name == name), None)

    @property
    def kv_bytes_per_token(self) -> int:
        """Per-token bytes of everything an offloading connector copies for one token."""
        return sum(p.bytes_per_token_per_rank for p in self.pools)

    def explicit_knob(self, unit_bytes: float, ranks: int = 1) -> int | None:
        """The recipe's explicit size per rank (`size-gb-per-rank`) in a backend knob's unit,
        rounded down so it never exceeds what was asked; `ranks` for knobs that are totals."""
        if self.topo.size_gb_per_rank is None:
            return None
        return math.floor(self.topo.size_gb_per_rank * GB * ranks / unit_bytes)

    @property
    def has_draft(self) -> bool:
        return self.topo.spec_decoding == "mtp" and self.model.mtp_layers > 0


@dataclass(slots=True)
class Sizing:
    pools: list[HostPool]
    host_kv_tokens: int
    pin_policy: str = "exact"
    engine_args: list[str] = field(default_factory=list)
    engine_env: dict[str, str] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    arithmetic: list[str] = field(default_factory=list)
    semantics: str | None = None


class Sizer(Protocol):
    """One offload backend. `engines` lists the engines that can run it; `size` must not raise
    for a budget that is too small: it returns the smallest sensible plan with `errors`."""

    name: str
    engines: tuple[str, ...]

    def size(self, ctx: SizingContext) -> Sizing: ...


@dataclass(frozen=True, slots=True)
class Fit:
    value: int | None  # the knob, in the sizer's unit; None when nothing fits
    pools: list[HostPool]
    errors: list[str]
    arithmetic: list[str]


def fit_knob(
    ctx: SizingContext,
    pools_of: Callable[[int], list[HostPool]],
    *,
    hi: int,
    explicit: int | None,
    pin_policy: str,
    describe: Callable[[int], str],
    zero_means: str | None = None,
    forced: int | None = None,
) -> Fit:
    """The largest knob value whose pools fit the per-rank share of the budget, or the
    explicit one if it fits. A refusal names the arithmetic and what would fit.
    `zero_means`: what the engine does with a knob of 0 (never "no host pool"); a plan whose
    knob rounds to 0 is refused with it. `forced` (--sizing launcher): this value, whether
    it fits or not; the planner gives the verdict."""
    limit = ctx.per_rank_budget_bytes

    def per_rank(x: int) -> int:
        return per_rank_bytes(pools_of(x), pin_policy)

    def checked(fit: Fit) -> Fit:
        if fit.value != 0 or zero_means is None:
            return fit
        if forced is not None:
            origin = "the launcher's arithmetic gives"
        elif explicit is not None:
            origin = (f"kv-offload-backend.size-gb-per-rank {ctx.topo.size_gb_per_rank:g} "
                      "rounds down to")
        else:
            origin = (f"total-cpu-dram-gb {ctx.topo.budget_gb:,} ({ctx.budget_bytes / GB:,.2f} "
                      f"GB after host headroom) over {ctx.ranks_on_node} rank(s) = "
                      f"{limit / GB:,.2f} GB per rank fits only")
        return Fit(None, fit.pools, [f"{origin} {describe(0)}, which is refused: {zero_means}"],
                   fit.arithmetic)

    if forced is not None:
        return checked(Fit(forced, pools_of(forced), [], [f"launcher: {describe(forced)}"]))
    best = largest_fitting(per_rank, hi, limit)
    if explicit is not None:
        pools = pools_of(explicit)
        if per_rank(explicit) <= limit:
            return checked(Fit(explicit, pools, [],
                               [f"explicit {describe(explicit)} fits the budget"]))
        fits = f"largest that fits: {describe(best)}" if best is not None else "nothing fits"
        need = per_rank(explicit)
        return Fit(
            None,
            pools,
            [f"explicit {describe(explicit)} needs {need / GB:,.2f} GB per rank with the pools "
             f"outside it, x {ctx.ranks_on_node} = {need * ctx.ranks_on_node / GB:,.0f} GB > "
             f"{ctx.budget_bytes / GB:,.0f} GB usable (budget less host headroom); {fits}"],
            [f"explicit {describe(explicit)} requested in kv-offload-backend.size-gb-per-rank"],
        )
    if best is None:
        return Fit(
            None,
            pools_of(0),
            [f"even the smallest host pools exceed the per-rank budget of {limit / GB:.2f} GB"],
            [],
        )
    return checked(Fit(best, pools_of(best), [],
                       [f"chosen: {describe(best)} (largest that fits)"]))
