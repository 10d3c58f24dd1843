"""What a mirrored offload twin carries beyond its resident row, where the key's launcher or the
seed pull requests practise it (data/twin_practice.yaml): a cap on the host pool per rank and
the image modifications the twin's image needs (edits of plan/data/image.yaml), both written
into the launcher's offload branch (authoring/launcher.py), never into the master config.
Read by `mirror`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.errors import KvbenchError, RecipeError
from kvbench.hardware import load_hardware
from kvbench.plan.image import all_mods, mod
from kvbench.plan.version import image_version

DATA = Path(__file__).parent / "data" / "twin_practice.yaml"
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)


class KeyWhen(BaseModel):
    """Which config keys a rule covers, by the facts `facts_of` gives."""

    model_config = _STRICT
    framework: str | list[str] | None = None
    model_prefix: str | list[str] | None = Field(None, alias="model-prefix")
    hardware: str | list[str] | None = None
    image_version: str | list[str] | None = Field(None, alias="image-version")

    def matches(self, facts: dict[str, Any]) -> bool:
        for name, want in self.model_dump(exclude_none=True).items():
            if facts.get(name) not in (want if isinstance(want, list) else [want]):
                return False
        return True


class _Practice(BaseModel):
    model_config = _STRICT
    source: str
    when: KeyWhen
    backend: str
    max_size_gb_per_rank: float | None = Field(None, alias="max-size-gb-per-rank", gt=0)
    patches: list[str] = Field(default_factory=list)


class _File(BaseModel):
    model_config = _STRICT
    practices: list[_Practice]


@dataclass(slots=True)
class Practice:
    """The merged practice of every rule matching one config key and backend."""

    max_size_gb_per_rank: float | None = None
    max_size_source: str = ""
    patches: list[dict[str, Any]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


@cache
def _file() -> _File:
    try:
        parsed = _File.model_validate(yamldoc.load_file(DATA, "twin practice file", RecipeError))
    except ValueError as e:
        raise RecipeError(f"invalid twin practice file {DATA}: {e}") from None
    edits = {i for i, m in all_mods().items() if m["kind"] == "edit"}
    unknown = {p for rule in parsed.practices for p in rule.patches} - edits
    if unknown:
        raise RecipeError(f"{DATA}: practices name patches {sorted(unknown)} that are no edit "
                          "of plan/data/image.yaml")
    return parsed


def facts_of(entry: dict[str, Any]) -> dict[str, Any]:
    try:
        hardware = load_hardware(str(entry.get("runner", ""))).name
    except KvbenchError:
        hardware = None
    release = image_version(str(entry.get("image", ""))).release
    return {"framework": entry.get("framework"), "model_prefix": entry.get("model-prefix"),
            "hardware": hardware,
            "image_version": ".".join(map(str, release)) if release else None}


def twin_practice(entry: dict[str, Any], backend: str) -> Practice:
    """The practice for `backend` twins of the master-config `entry` (its raw mapping)."""
    data = _file()
    facts = facts_of(entry)
    out = Practice()
    for rule in data.practices:
        if rule.backend != backend or not rule.when.matches(facts):
            continue
        out.sources.append(rule.source)
        if rule.max_size_gb_per_rank is not None:
            out.max_size_gb_per_rank = rule.max_size_gb_per_rank
            out.max_size_source = rule.source
        for pid in rule.patches:
            if pid not in {p["id"] for p in out.patches}:
                out.patches.append(mod(pid))
    return out
