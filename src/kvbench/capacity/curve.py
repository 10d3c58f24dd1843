"""The capacity curve (sessions under the SLO per host-tier size), its knee, and the
capacity.json document that carries both to the CLI table and the dashboard."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbench.capacity.slo import Slo

CAPACITY_FILE = "capacity.json"
DOC_VERSION = 1


class Step(BaseModel):
    """One probed concurrency."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int
    passed: bool
    violations: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    result_path: str | None = None  # measured steps: the step's result.json


class HostPoint(BaseModel):
    """The search at one host-tier size (per rank, decimal GB)."""

    model_config = ConfigDict(extra="forbid")

    host_gb: float
    gpu_kv_tokens: int
    host_kv_tokens: int
    max_sessions: int  # 0: even one session breaks the SLO
    first_failing: int | None  # None: the ceiling passed
    engine_args: list[str] = Field(default_factory=list)  # the planner's flags at this size
    steps: list[Step] = Field(default_factory=list)
    wall_s: float = 0.0


class Knee(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host_gb: float  # the smallest size reaching the most sessions
    max_sessions: int
    resident_sessions: int | None  # at 0 GB, when the grid has it
    plateau: bool  # True: a larger size on the grid gained nothing
    engine_args: list[str] = Field(default_factory=list)
    text: str


class CapacityDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["kvbench-capacity"] = "kvbench-capacity"
    version: int = DOC_VERSION
    target: dict[str, Any]
    workload: dict[str, Any]
    slo: Slo
    ceiling: int
    assumptions: list[str] = Field(default_factory=list)
    predicted: list[HostPoint] = Field(default_factory=list)
    knee: Knee | None = None
    measured: list[HostPoint] = Field(default_factory=list)
    wall_s: float = 0.0


def _gb(x: float) -> str:
    return f"{x:g} GB"


def sessions_text(n: int, ceiling: int | None) -> str:
    """A search answer: at the ceiling the SLO was never broken, so the answer is censored
    (the most the workload offers), not a measured limit."""
    if ceiling is not None and n >= ceiling:
        return f">= {n} sessions (the most the workload offers)"
    return f"{n} sessions"


def find_knee(points: list[HostPoint], ceiling: int | None = None) -> Knee | None:
    """The smallest host size that reaches the curve's maximum; `plateau` when the grid goes
    beyond it (so "beyond M GB no gain" is observed, not extrapolated). At `ceiling` (the
    workload's sessions) the answer is censored and says so."""
    if not points:
        return None
    pts = sorted(points, key=lambda p: p.host_gb)
    best = max(p.max_sessions for p in pts)
    knee = next(p for p in pts if p.max_sessions == best)
    plateau = knee.host_gb < pts[-1].host_gb
    resident = next((p.max_sessions for p in pts if p.host_gb == 0), None)
    if best == 0:
        text = (f"no host size up to {_gb(pts[-1].host_gb)} meets the SLO even with one "
                "session")
    elif plateau:
        text = (f"host {_gb(knee.host_gb)} -> {sessions_text(best, ceiling)}; beyond "
                f"{_gb(knee.host_gb)} no gain")
    elif ceiling is not None and best >= ceiling:
        text = (f"host {_gb(knee.host_gb)} -> {sessions_text(best, ceiling)}: the SLO held at "
                "every concurrency tried; a larger workload would find the limit")
    else:
        text = (f"host {_gb(knee.host_gb)} -> {best} sessions; still rising at the largest "
                "size tried: more host DRAM may add sessions")
    if resident is not None and best > 0:
        text += f" (0 GB: {resident})"
    return Knee(host_gb=knee.host_gb, max_sessions=best, resident_sessions=resident,
                plateau=plateau, engine_args=knee.engine_args, text=text)


def host_grid(budget_gb: float, points: int) -> list[float]:
    """0 and `points` sizes up to the budget, in whole GB (HiCache's --hicache-size takes
    whole GB; a whole-GB grid is exact for every backend's knob)."""
    top = int(budget_gb)
    if points < 1:
        return [0.0]
    return sorted({float(round(top * i / points)) for i in range(points + 1)})
