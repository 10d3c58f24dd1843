"""`--sizing launcher`: the host pool an InferenceX agentic launcher would give a row, from
its own shell arithmetic (data/launcher_sizing.yaml, one rule per launcher with its source
line), so a user can reproduce an InferenceX point and see why kvbench's budget sizing
differs. The planner sizes the engine's pools at this value and gives its verdict beside it.

What the engine makes of each launcher knob (`KNOBS`) is engine semantics, cited there; the
launchers' numbers are data."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kvbench import yamldoc
from kvbench.errors import EngineError, PlanError
from kvbench.expr import evaluate
from kvbench.plan.settings import When
from kvbench.units import GB, GiB

DATA = Path(__file__).parent / "data" / "launcher_sizing.yaml"
SIZING_MODES = ("budget", "launcher")
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


class _Rule(BaseModel):
    model_config = _STRICT
    source: str
    when: When
    knob: Literal[tuple(KNOBS)]  # type: ignore[valid-type]
    formula: str
    value: str | int | float
    unrecorded: str | None = None


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
        return LauncherSize(rule.source, rule.knob, value, rule.formula, used)
    return None


def check_mode(sizing: str, force: bool = False) -> str:
    """The --sizing / --force pair of plan, launch and run, refused as one."""
    if sizing not in SIZING_MODES:
        raise PlanError(f"--sizing {sizing!r} is not allowed (allowed: "
                        f"{', '.join(SIZING_MODES)})")
    if force and sizing != "launcher":
        raise PlanError("--force applies to --sizing launcher only",
                        hint="the budget sizing never oversubscribes; add --sizing launcher")
    return sizing
