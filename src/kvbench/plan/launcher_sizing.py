"""Launcher sizing (the default; `--sizing budget` is the planner's own): the host pool an
InferenceX agentic launcher gives a row, from its own shell arithmetic
(data/launcher_sizing.yaml, one rule per launcher with its source line), so a row with an
InferenceX exp-name runs the experiment InferenceX published under it. The planner sizes the
engine's pools at this value and gives its verdict, with the budget sizing beside it.

What the engine makes of each launcher knob (`KNOBS`) is engine semantics, cited there; the
launchers' numbers are data."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.errors import EngineError, PlanError
from kvbench.expr import evaluate
from kvbench.plan.settings import When
from kvbench.units import GB, GiB

DATA = Path(__file__).parent / "data" / "launcher_sizing.yaml"
SIZING_MODES = ("launcher", "budget")
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)


@dataclass(frozen=True, slots=True)
class Knob:
    """`unit_bytes` per unit of the value (0: a ratio of the device pool); `per`: `rank`, or
    `engine` (a total the engine divides over its ranks); `spelling`: how the launcher
    writes it."""

    unit_bytes: int
    per: str
    spelling: str
    engine_semantics: str


KNOBS: dict[str, Knob] = {
    "hicache-size": Knob(GB, "rank", "--hicache-size {v}",
                         "GB (1e9) per rank (sglang srt/mem_cache/memory_pool_host.py)"),
    "hicache-ratio": Knob(0, "rank", "--hicache-ratio {v}",
                          "host pool = ratio x device pool (sglang HostKVCache)"),
    "cpu-bytes-to-use": Knob(1, "engine", "kv_connector_extra_config.cpu_bytes_to_use {v}",
                             "bytes per engine, // world size (vllm 0.33 "
                             "simple_cpu_offload_connector.py:100-106)"),
    "cpu-bytes-to-use-per-rank": Knob(
        1, "rank", "kv_connector_extra_config.cpu_bytes_to_use_per_rank {v}",
        "bytes per rank (vllm 0.33 simple_cpu_offload_connector.py:107-115)"),
    "kv-offloading-size": Knob(GiB, "engine", "--kv-offloading-size {v}",
                               "GiB per engine (vllm 0.33 config/vllm.py:1174, x 2^30)"),
    "lmcache-max-local-cpu-size": Knob(GiB, "rank", "LMCACHE_MAX_LOCAL_CPU_SIZE={v}",
                                       "per worker, x 1024^3 (LMCache local CPU backend)"),
    "lmcache-l1-size-gb": Knob(GiB, "rank", "lmcache server --l1-size-gb {v}",
                               "per server, one per rank, x 2^30 (lmcache v1/distributed/"
                               "config.py)"),
    "mooncake-global-segment-gb": Knob(GiB, "rank", 'global_segment_size "{v}GB"',
                                       "per rank; 'NGB' is N x 1024^3 (mooncake 0.3.11.post1 "
                                       "mooncake_config.py _parse_segment_size)"),
    "host-cache-size": Knob(1, "rank", "kv_cache_config.host_cache_size {v}",
                            "bytes per rank (TensorRT-LLM KvCacheConfig)"),
}


class _Point(BaseModel):
    """One shape the launcher measured: `tp` / `dp-attn` (absent: any), and what it saw:
    the host memory pinned on the node and/or the engine's device pool per rank."""

    model_config = _STRICT
    tp: int | None = None
    dp_attn: bool | None = Field(None, alias="dp-attn")
    host_gb_on_node: float | None = Field(None, alias="host-gb-on-node", gt=0)
    device_gb_per_rank: float | None = Field(None, alias="device-gb-per-rank", gt=0)
    host_kv_tokens: int | None = Field(None, alias="host-kv-tokens", gt=0)


class _Measured(BaseModel):
    """What the launcher's comment says it measured at this knob (a ratio's real size
    depends on the engine's device pool, which kvbench only estimates)."""

    model_config = _STRICT
    source: str
    says: str
    points: list[_Point]


class _Rule(BaseModel):
    model_config = _STRICT
    source: str
    when: When
    knob: Literal[tuple(KNOBS)]  # type: ignore[valid-type]
    formula: str
    value: str | int | float
    unrecorded: str | None = None
    measured: _Measured | None = None


@dataclass(frozen=True, slots=True)
class Measurement:
    """The launcher's measurement for a row: `applies` when the point's shape is the row's
    (then the verdict uses it), else shown beside the estimate only."""

    source: str
    says: str
    applies: bool
    host_bytes_on_node: int | None = None
    device_bytes_per_rank: int | None = None
    host_kv_tokens: int | None = None

    @property
    def line(self) -> str:
        what = []
        if self.device_bytes_per_rank:
            what.append(f"device pool {self.device_bytes_per_rank / GB:,.1f} GB per rank")
        if self.host_kv_tokens:
            what.append(f"{self.host_kv_tokens:,} host KV token slots per rank")
        if self.host_bytes_on_node:
            what.append(f"{self.host_bytes_on_node / GB:,.0f} GB pinned on the node")
        head = f"launcher's measurement ({self.source}): \"{self.says}\""
        if not self.applies:
            return head + " (another shape than this row's: shown, not used)"
        return head + (f" -> {', '.join(what)}" if what else " (no figure: the verdict keeps "
                                                                "the estimate)")


class _File(BaseModel):
    model_config = _STRICT
    rules: list[_Rule]


@dataclass(frozen=True, slots=True)
class LauncherSize:
    """A launcher's host-pool value for one row. `value` is in the knob's unit."""

    source: str
    knob: str
    value: int | float
    formula: str
    names: dict[str, Any]  # the row's values the formula read
    measured: Measurement | None = None

    @property
    def spec(self) -> Knob:
        return KNOBS[self.knob]

    @property
    def is_ratio(self) -> bool:
        return self.spec.unit_bytes == 0

    @property
    def spelled(self) -> str:
        return self.spec.spelling.format(v=f"{self.value:g}" if isinstance(self.value, float)
                                         else self.value)

    def bytes_per_rank(self, world: int) -> int:
        """The bytes each rank gets (not for a ratio); `world`: the engine's ranks."""
        total = int(self.value * self.spec.unit_bytes)
        return total // world if self.spec.per == "engine" else total

    def engine_total_bytes(self, world: int) -> int:
        total = int(self.value * self.spec.unit_bytes)
        return total if self.spec.per == "engine" else total * world

    @property
    def line(self) -> str:
        inputs = ", ".join(f"{k}={v}" for k, v in self.names.items())
        return (f"launcher sizing ({self.source}): {self.formula}"
                + (f" with {inputs}" if inputs else "") + f" -> {self.spelled} "
                f"({self.spec.engine_semantics})")


@cache
def _rules(path: Path = DATA) -> tuple[_Rule, ...]:
    try:
        parsed = _File.model_validate(yamldoc.load_file(path, "launcher sizing file",
                                                        PlanError))
    except (OSError, ValueError) as e:
        raise PlanError(f"invalid launcher sizing file {path}: {e}") from None
    return tuple(parsed.rules)


def rules() -> tuple[_Rule, ...]:
    return _rules()


def launcher_size(facts: dict[str, Any], names: dict[str, Any]) -> LauncherSize | None:
    """The first rule matching `facts` (engine, model_prefix, hardware, precision, offload,
    dp_attn, tp, conc), evaluated over `names` (total_cpu_dram_gb, tp, ep, pcp, conc,
    dp_attn); None when no launcher of the pinned commit sizes such a row."""
    for rule in _rules():
        if not rule.when.matches(facts):
            continue
        value = rule.value
        used: dict[str, Any] = {}
        if isinstance(value, str):
            try:
                value = evaluate(value, names, f"{DATA.name} rule {rule.source!r}")
            except (EngineError, ZeroDivisionError) as e:
                raise PlanError(f"{DATA.name} rule {rule.source!r}: {e}") from None
            # the row's values the formula reads, shown beside it in the plan
            read = {n.id for n in ast.walk(ast.parse(rule.value, mode="eval"))
                    if isinstance(n, ast.Name)}
            used = {k: v for k, v in names.items() if k in read}
        return LauncherSize(rule.source, rule.knob, value, rule.formula, used,
                            _measurement(rule.measured, facts))
    return None


def _measurement(measured: _Measured | None, facts: dict[str, Any]) -> Measurement | None:
    if measured is None:
        return None
    for point in measured.points:
        if point.tp not in (None, facts.get("tp")) or \
                point.dp_attn not in (None, facts.get("dp_attn")):
            continue
        return Measurement(
            measured.source, measured.says, True,
            int(point.host_gb_on_node * GB) if point.host_gb_on_node else None,
            int(point.device_gb_per_rank * GB) if point.device_gb_per_rank else None,
            point.host_kv_tokens)
    return Measurement(measured.source, measured.says, False)


def check_mode(sizing: str, force: bool = False) -> str:
    """The --sizing / --force pair of plan, launch and run, refused as one."""
    if sizing not in SIZING_MODES:
        raise PlanError(f"--sizing {sizing!r} is not allowed (allowed: "
                        f"{', '.join(SIZING_MODES)})")
    if force and sizing != "launcher":
        raise PlanError("--force applies to launcher sizing only",
                        hint="the budget sizing never oversubscribes; drop --sizing budget")
    return sizing
