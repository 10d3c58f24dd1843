"""An srt-slurm recipe: the YAML that NVIDIA's `srtctl` renders into a Slurm job of Dynamo
(or direct vLLM) workers, and that InferenceX names in a multi-node row's `CONFIG_FILE=`.

The recipes are copied from InferenceX at 843c6254f (benchmarks/multi_node/srt-slurm-recipes/,
overlaid by the NVIDIA runners onto the srt-slurm checkout: `cp -rT` into `recipes/<x>`, or
kept at their InferenceX path for the dynamo-trt ones) into `data/srt_recipes/`. A row names
one as `recipes/<x>` or `benchmarks/multi_node/srt-slurm-recipes/<x>`, optionally with a
`:zip_override_<group>[i]` selector, resolved as srtctl does (core/config.py
`resolve_override_config`: `base` deep-merged with the i-th slice of the group, lists of
length one broadcast, the name `<base name>_<group>_<i>`)."""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbench import yamldoc
from kvbench.engines.rules import DATA_DIR
from kvbench.errors import EngineError

RECIPES = DATA_DIR / "srt_recipes"
PREFIXES = ("recipes/", "benchmarks/multi_node/srt-slurm-recipes/")
_SELECTOR = re.compile(r"^zip_override_(?P<group>[\w.-]+)\[(?P<index>\d+)\]$")
_FORBID = ConfigDict(extra="forbid")


class Resources(BaseModel):
    """srtctl core/schema.py ResourceConfig (the fields InferenceX's recipes set)."""

    model_config = _FORBID
    gpu_type: str
    gpus_per_node: int
    prefill_nodes: int = 0
    decode_nodes: int = 0
    agg_nodes: int = 0
    prefill_workers: int = 0
    decode_workers: int = 0
    agg_workers: int = 0
    gpus_per_prefill: int | None = None
    gpus_per_decode: int | None = None
    gpus_per_agg: int | None = None
    het_jobs: bool = False
    spread_workers: bool = False

    def gpus_per(self, mode: str) -> int:
        """schema.py ResourceConfig.gpus_per_<mode>: the explicit count, else the mode's nodes
        x gpus_per_node spread over its workers."""
        explicit = getattr(self, f"gpus_per_{mode}")
        if explicit:
            return int(explicit)
        workers = getattr(self, f"{mode}_workers")
        nodes = getattr(self, f"{mode}_nodes")
        return nodes * self.gpus_per_node // workers if workers else 0


class Recipe(BaseModel):
    """The top level of a recipe; the engine sections stay the free-form dicts srtctl turns
    into flags and environment."""

    model_config = _FORBID
    name: str
    model: dict[str, Any]
    resources: Resources
    backend: dict[str, Any]
    frontend: dict[str, Any] = Field(default_factory=dict)
    benchmark: dict[str, Any] = Field(default_factory=dict)
    health_check: dict[str, Any] = Field(default_factory=dict)
    dynamo: dict[str, Any] = Field(default_factory=dict)
    srun_options: dict[str, Any] = Field(default_factory=dict)
    infra: dict[str, Any] = Field(default_factory=dict)
    sbatch_directives: dict[str, Any] = Field(default_factory=dict)
    slurm: dict[str, Any] = Field(default_factory=dict)
    identity: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    setup_script: str | None = None

    @property
    def backend_type(self) -> str:
        return str(self.backend["type"])

    @property
    def frontend_type(self) -> str:
        return str(self.frontend.get("type") or "dynamo")

    def mode_config(self, mode: str) -> dict[str, Any]:
        """backend.<type>_config.<prefill|decode|aggregated> (schema.py get_config_for_mode)."""
        section = self.backend.get(f"{self.backend_type}_config") or {}
        return dict(section.get("aggregated" if mode == "agg" else mode) or {})

    def mode_environment(self, mode: str) -> dict[str, str]:
        key = "aggregated_environment" if mode == "agg" else f"{mode}_environment"
        return {k: str(v) for k, v in (self.backend.get(key) or {}).items()}


def recipe_name(config_file: str) -> tuple[str, str | None]:
    """(path under data/srt_recipes/, selector) of a row's CONFIG_FILE value."""
    path, _, selector = config_file.partition(":")
    for prefix in PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix):], selector or None
    raise EngineError(f"CONFIG_FILE {config_file!r} is not an srt-slurm recipe path",
                      hint=f"expected a path under {' or '.join(PREFIXES)}")


@cache
def load_recipe(config_file: str) -> Recipe:
    name, selector = recipe_name(config_file)
    path = RECIPES / name
    if not path.is_file():
        raise EngineError(f"CONFIG_FILE {config_file}: no such recipe in InferenceX 843c6254f "
                          "or srt-slurm: `srtctl apply -f` has no file to render and the runner "
                          "exits 1")
    raw = yamldoc.load_file(path, "srt-slurm recipe", EngineError)
    if selector is not None:
        raw = _select(raw, selector, config_file)
    try:
        return Recipe.model_validate(raw)
    except ValidationError as e:
        raise EngineError(f"recipe {config_file}: {e.errors()[0]['loc']}: "
                          f"{e.errors()[0]['msg']}") from None


def _select(raw: dict[str, Any], selector: str, where: str) -> dict[str, Any]:
    m = _SELECTOR.match(selector)
    group = raw.get(f"zip_override_{m['group']}") if m else None
    if group is None or "base" not in raw:
        raise EngineError(f"{where}: selector {selector!r} names no zip_override group")
    lengths = _list_lengths(group)
    n = max((x for x in lengths if x != 1), default=1)
    index = int(m["index"])
    if index >= n:
        raise EngineError(f"{where}: {selector} is past the group's {n} variants")
    merged = deep_merge(raw["base"], _slice(group, index))
    if not isinstance(group.get("name"), list):
        merged["name"] = f"{raw['base'].get('name', 'unnamed')}_{m['group']}_{index}"
    return merged


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """srtctl core/config.py deep_merge: dicts merge, lists and scalars replace, None
    deletes."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _list_lengths(d: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for v in d.values():
        if isinstance(v, list):
            out.append(len(v))
        elif isinstance(v, dict):
            out += _list_lengths(v)
    return out


def _slice(d: dict[str, Any], index: int) -> dict[str, Any]:
    return {k: (v[0 if len(v) == 1 else index] if isinstance(v, list)
                else _slice(v, index) if isinstance(v, dict) else v) for k, v in d.items()}


def config_file_of(row: dict[str, Any]) -> str | None:
    for role in ("prefill", "decode"):
        for setting in (row.get(role) or {}).get("additional-settings") or []:
            name, _, value = str(setting).partition("=")
            if name == "CONFIG_FILE":
                return value
    return None
