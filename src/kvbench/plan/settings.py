"""Recipe settings that change an engine's allocation (memory fraction, KV dtype, page size,
HiCache write policy / io backend / layout), read from `data/settings.yaml`.

The InferenceX launchers hard-code these per model, GPU and arm; the planner sizes with the
same values and the engine adapters pass them, so kvbench starts the server the recipe runs.
A row no rule matches keeps the planner's engine defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.errors import PlanError

DATA = Path(__file__).parent / "data" / "settings.yaml"
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)
Scalar = str | int | float | bool
UNSETTABLE = ("page-size", "kv-dtype", "mem-fraction", "max-running-requests")


class When(BaseModel):
    """Which rows a rule applies to: every key given must match the row's fact (a list: any
    of them); `conc-min`: conc >= value. Shared by data/launcher_sizing.yaml."""

    model_config = _STRICT
    engine: Scalar | list[Scalar] | None = None
    model_prefix: Scalar | list[Scalar] | None = Field(None, alias="model-prefix")
    hardware: Scalar | list[Scalar] | None = None
    precision: Scalar | list[Scalar] | None = None
    offload: Scalar | list[Scalar] | None = None
    dp_attn: bool | None = Field(None, alias="dp-attn")
    tp: int | list[int] | None = None
    conc: int | list[int] | None = None
    conc_min: int | None = Field(None, alias="conc-min")
    # the worker's role in a prefill/decode-disaggregated row; absent: any row
    role: Scalar | list[Scalar] | None = None
    # the row's spec-decoding (launcher_sizing.yaml: the runner picks a launcher by it)
    spec_decoding: Scalar | list[Scalar] | None = Field(None, alias="spec-decoding")

    def matches(self, facts: dict[str, Any]) -> bool:
        if self.conc_min is not None and facts["conc"] < self.conc_min:
            return False
        for name, want in self.model_dump(exclude_none=True, exclude={"conc_min"}).items():
            if facts.get(name) not in (want if isinstance(want, list) else [want]):
                return False
        return True


class _HiCache(BaseModel):
    model_config = _STRICT
    write_policy: str | None = Field(None, alias="write-policy")
    io_backend: str | None = Field(None, alias="io-backend")
    mem_layout: str | None = Field(None, alias="mem-layout")


class _Set(BaseModel):
    model_config = _STRICT
    mem_fraction: float | None = Field(None, alias="mem-fraction", gt=0, le=1)
    kv_dtype: str | None = Field(None, alias="kv-dtype")
    page_size: int | None = Field(None, alias="page-size", ge=1)
    mamba_ssm_dtype: str | None = Field(None, alias="mamba-ssm-dtype")
    # GiB of each rank's weights the engine keeps in host memory (vLLM --cpu-offload-gb,
    # "the space in GiB to offload to CPU, per GPU", vllm 0.33 config/offload.py:23-24):
    # taken out of the host budget before the KV pools are sized
    weights_offload_gib: int | None = Field(None, alias="weights-offload-gib", gt=0)
    # tokenizer processes the launcher starts (SGLang --tokenizer-worker-num): each holds a
    # CUDA context and a share of the multimodal CUDA-IPC pool on GPU 0 (plan/gpu.py)
    tokenizer_workers: int | None = Field(None, alias="tokenizer-workers", ge=1)
    unset: list[str] = Field(default_factory=list)
    hicache: _HiCache | None = None


class _Rule(BaseModel):
    model_config = _STRICT
    source: str
    when: When = Field(default_factory=When)
    set: _Set


class _File(BaseModel):
    model_config = _STRICT
    rules: list[_Rule]


@dataclass(frozen=True, slots=True)
class RecipeSettings:
    """The merged settings of every matching rule; None where no rule sets a value."""

    mem_fraction: float | None = None
    kv_dtype: str | None = None
    page_size_tokens: int | None = None
    mamba_ssm_dtype: str | None = None
    weights_offload_gib: int | None = None
    tokenizer_workers: int | None = None
    unset: tuple[str, ...] = ()
    hicache: dict[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()


@cache
def _rules(path: Path = DATA) -> tuple[_Rule, ...]:
    try:
        parsed = _File.model_validate(yamldoc.load_file(path, "settings file", PlanError))
    except (OSError, ValueError) as e:
        raise PlanError(f"invalid recipe settings file {path}: {e}") from None
    for rule in parsed.rules:
        bad = set(rule.set.unset) - set(UNSETTABLE)
        if bad:
            raise PlanError(f"{path}: rule {rule.source!r}: unset {sorted(bad)}; "
                            f"allowed: {', '.join(UNSETTABLE)}")
    return tuple(parsed.rules)


def recipe_settings(facts: dict[str, Any]) -> RecipeSettings:
    """facts: engine, model_prefix, hardware, precision, offload, dp_attn, tp, conc, role."""
    values: dict[str, Any] = {}
    hicache: dict[str, str] = {}
    sources: list[str] = []
    for rule in _rules():
        if not rule.when.matches(facts):
            continue
        sources.append(rule.source)
        chosen = rule.set.model_dump(exclude_none=True, exclude={"hicache"})
        if not rule.set.unset:
            chosen.pop("unset", None)
        values.update(chosen)
        if rule.set.hicache is not None:
            hicache.update(rule.set.hicache.model_dump(exclude_none=True, by_alias=True))
    return RecipeSettings(
        mem_fraction=values.get("mem_fraction"),
        kv_dtype=values.get("kv_dtype"),
        page_size_tokens=values.get("page_size"),
        mamba_ssm_dtype=values.get("mamba_ssm_dtype"),
        weights_offload_gib=values.get("weights_offload_gib"),
        tokenizer_workers=values.get("tokenizer_workers"),
        unset=tuple(values.get("unset", ())),
        hicache=hicache,
        sources=tuple(sources),
    )
