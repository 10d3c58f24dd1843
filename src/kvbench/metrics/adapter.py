"""Per-engine metric adapters: YAML data mapping an engine's Prometheus names onto FIELDS.

Each field lists candidate sources in order of preference; the first whose metric family
appears in any snapshot is used (a newer name before an older one)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kvbench import yamldoc
from kvbench.errors import MetricsError
from kvbench.metrics.fields import FIELDS


class _Strict(BaseModel):
    # A typo in an adapter file must fail loudly, not silently drop a metric.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    metric: str
    labels: dict[str, str] = {}
    # How series of one snapshot combine (after replica copies are collapsed).
    across: Literal["sum", "max", "mean"] = "sum"
    # Value = product of these label values (info metrics such as vllm:cache_config_info).
    from_labels: list[str] = []
    # Value = this metric times another (e.g. blocks x tokens per block).
    times: str | None = None

    def label_patterns(self) -> dict[str, re.Pattern[str]]:
        return {k: re.compile(v) for k, v in self.labels.items()}


class Signal(_Strict):
    field: str
    when: Literal["present", "positive"]


class Adapter(_Strict):
    engine: str
    aliases: list[str] = []
    replica_labels: list[str] = []
    fields: dict[str, list[Source]] = {}
    offload_signals: list[Signal] = []
    spec_signals: list[Signal] = []

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, v: dict[str, list[Source]]) -> dict[str, list[Source]]:
        unknown = sorted(set(v) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown fields {unknown}; allowed: {sorted(FIELDS)}")
        return v

    def metric_names(self) -> set[str]:
        """Every sample name this adapter reads (what the scraper keeps during a run)."""
        names = set()
        for sources in self.fields.values():
            for s in sources:
                names.add(s.metric)
                if s.times:
                    names.add(s.times)
        return names


def known_engines() -> list[str]:
    files = resources.files("kvbench.metrics") / "adapters"
    return sorted(p.name.removesuffix(".yaml") for p in files.iterdir()
                  if p.name.endswith(".yaml"))


def _aliases() -> dict[str, str]:
    out = {}
    for name in known_engines():
        path = resources.files("kvbench.metrics") / "adapters" / f"{name}.yaml"
        for alias in (yamldoc.load_file(str(path), "metric adapter", MetricsError) or {}
                      ).get("aliases") or []:
            out[alias] = name
    return out


@cache
def load_adapter(engine: str) -> Adapter:
    """The adapter for `engine` (sglang, vllm, trtllm, sim, or a recipe framework name such
    as trt or dynamo-vllm); unknown names list the known ones."""
    known = known_engines()
    if engine not in known:
        aliases = _aliases()
        if engine in aliases:
            return load_adapter(aliases[engine])
        raise MetricsError(f"no metric adapter for engine {engine!r}",
                           hint=f"known engines: {', '.join(known + sorted(aliases))}")
    path = resources.files("kvbench.metrics") / "adapters" / f"{engine}.yaml"
    raw = yamldoc.load_file(str(path), "metric adapter", MetricsError)
    if isinstance(raw, dict) and "same_as" in raw:
        base = load_adapter(raw["same_as"])
        return base.model_copy(update={"engine": raw.get("engine", engine)})
    try:
        return Adapter.model_validate(raw)
    except ValidationError as e:
        raise MetricsError(f"metric adapter {path} is invalid: {e}") from e
