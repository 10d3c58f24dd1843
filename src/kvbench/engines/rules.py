"""Engine data files (`engines/data/<engine>.yaml`): the program, URL paths and an ordered
list of rules, each adding flags, environment variables or config-file keys to the jobs it
matches. Per-model and per-hardware knowledge lives there, not in code."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbench import yamldoc
from kvbench.errors import EngineError

DATA_DIR = Path(__file__).parent / "data"
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)

Scalar = str | int | float | bool


class When(BaseModel):
    """Conditions of a rule; each is one value or a list of allowed values, all must hold."""

    model_config = _STRICT
    model_prefix: Scalar | list[Scalar] | None = Field(None, alias="model-prefix")
    model: Scalar | list[Scalar] | None = None
    hardware: Scalar | list[Scalar] | None = None
    precision: Scalar | list[Scalar] | None = None
    offload: Scalar | list[Scalar] | None = None
    spec: Scalar | list[Scalar] | None = None
    dp_attn: bool | None = Field(None, alias="dp-attn")
    tp: Scalar | list[Scalar] | None = None
    ep: Scalar | list[Scalar] | None = None
    # the row's concurrency: launchers that pick knobs per concurrency point (a `case "$CONC"`)
    conc: int | list[int] | None = None
    accuracy: bool | None = None
    router: bool | None = None
    # the worker's role in a prefill/decode-disaggregated row (engines/disaggregation.py)
    role: Scalar | list[Scalar] | None = None
    # the row's concurrency, inclusive bounds (launchers that pick an arm by CONC)
    min_conc: int | None = Field(None, alias="min-conc")
    max_conc: int | None = Field(None, alias="max-conc")
    # Release versions read from the image tag; nightly and unknown tags count as newest.
    min_version: str | None = Field(None, alias="min-version")
    below_version: str | None = Field(None, alias="below-version")

    def matches(self, facts: dict[str, Any]) -> bool:
        version = facts.get("version")
        if self.min_version and version is not None and version < _parse(self.min_version):
            return False
        if self.below_version and (version is None or version >= _parse(self.below_version)):
            return False
        conc = facts.get("conc")
        if self.min_conc is not None and (conc is None or conc < self.min_conc):
            return False
        if self.max_conc is not None and (conc is None or conc > self.max_conc):
            return False
        plain = self.model_dump(exclude_none=True, exclude={"min_version", "below_version",
                                                            "min_conc", "max_conc"})
        for name, want in plain.items():
            allowed = want if isinstance(want, list) else [want]
            if facts.get(name) not in allowed:
                return False
        return True


def _parse(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


class Rule(BaseModel):
    model_config = _STRICT
    name: str
    when: When = Field(default_factory=When)
    why: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    # Flags spelled differently by this engine version: the value moves to the new name.
    rename: dict[str, str] = Field(default_factory=dict)
    # flag -> a file beside the data files (engines/data/), written into the job directory
    # under its name; the flag gets its path (a launcher's chat template)
    files: dict[str, str] = Field(default_factory=dict)


class RouterData(BaseModel):
    model_config = _STRICT
    program: list[str]
    args: dict[str, Any] = Field(default_factory=dict)
    correlation_header: str = Field(alias="correlation-header")
    health_path: str = Field("/health", alias="health-path")
    engine_port_offset: int = Field(1, alias="engine-port-offset")


class EngineData(BaseModel):
    model_config = _STRICT
    engine: str
    program: list[str]
    # Flag that names the model; None means the model is the first positional argument.
    model_flag: str | None = Field(None, alias="model-flag")
    health_path: str = Field("/health", alias="health-path")
    metrics_path: str = Field("/metrics", alias="metrics-path")
    kv_dtype: dict[str, str] = Field(default_factory=dict, alias="kv-dtype")
    config_file: str | None = Field(None, alias="config-file")
    # Flags that serve the model's shape with random weights (no checkpoint read); None: the
    # engine cannot.
    dummy_weights: dict[str, Any] | None = Field(None, alias="dummy-weights")
    # The flag naming the tokenizer when a rule sets it apart from the model (the qwen3.5
    # launchers read it from the HF id): with dummy weights it names the model directory,
    # which carries the only tokenizer there is (`kvbench dummy-model`).
    tokenizer_flag: str | None = Field(None, alias="tokenizer-flag")
    # The flag with which the engine reports per-request cached tokens and leaves the usage's
    # prompt_tokens_details out when none were cached (absent then means 0, not unknown).
    cache_report_omits_zero: str | None = Field(None, alias="cache-report-omits-zero")
    routers: dict[str, RouterData] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)

    def matching(self, facts: dict[str, Any]) -> list[Rule]:
        return [r for r in self.rules if r.when.matches(facts)]


@cache
def load_engine_data(engine: str, path: Path | None = None) -> EngineData:
    path = path or DATA_DIR / f"{engine}.yaml"
    try:
        raw = yamldoc.load_file(path, "engine data file", EngineError)
        return EngineData.model_validate(raw)
    except ValidationError as e:
        lines = [f"{path}: " + ".".join(str(p) for p in err["loc"]) + f": {err['msg']}"
                 for err in e.errors()]
        raise EngineError(f"invalid engine data file {path}\n" + "\n".join(lines)) from None
