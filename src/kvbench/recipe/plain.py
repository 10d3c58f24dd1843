"""The recipe schema restated in plain Python, for `kvbench matrix` with a cold parse cache.

Importing pydantic and building the recipe models is about half of a cold `kvbench matrix`
(docs/performance.md, issue 24 item 5). This table states the models' fields a second time
(alias, type, bounds, default) in a small vocabulary that a few lines interpret, and runs the
same rule functions as the models (recipe/rules.py). It only accepts or declines, never
explains: a file it declines goes to the pydantic loader, whose messages stay the reference.
It declines whatever it is not sure the models accept (a `bytes`, `set` or `tuple` where
the models would coerce one, say), and it must never accept what they refuse:
tests/recipe/test_plain_schema.py holds this table to the models' fields and validators, and
both to the same verdict on every committed config and on mutated ones.

Type semantics, as pydantic 2 has them for these annotations: `Str` is a `str` (with a
length or pattern bound, one that encodes as UTF-8); `Int` a strict int (no bool); `Float`
a strict float (an int or float, no bool, an int only if it converts); `Bool` a strict bool;
`OneOf` a Literal (a bool member also matches the number 0 or 1, as pydantic's lax Literal
does); lists, mappings and nested models are the `list`, `dict` and `dict` YAML builds."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.errors import RecipeError
from kvbench.recipe import rules
from kvbench.recipe.arms import ALL_ARMS
from kvbench.recipe.facts import RunnerFacts
from kvbench.recipe.fields import (
    ARCHES,
    KV_OFFLOAD_BACKENDS,
    KV_OFFLOADINGS,
    PATCH_ID_PATTERN,
    SPEC_DECODINGS,
    WRITE_POLICIES,
)

# --- the vocabulary: each kind and the check it compiles to (the value, or Declined) ------

_Check = Callable[[Any], Any]


class Declined(Exception):
    """Not a value the plain schema is sure the models accept."""


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: pydantic refuses it in a bounded string
        return False
    return True


@dataclass(frozen=True)
class Str:
    min_length: int = 0
    pattern: str | None = None

    def check(self, models: dict[str, _Check]) -> _Check:
        least = self.min_length
        # pydantic's regex engine reads `$` as the end of the text, as fullmatch does
        match = re.compile(self.pattern.removeprefix("^").removesuffix("$")).fullmatch \
            if self.pattern else None
        if not least and match is None:
            def text(v: Any) -> Any:
                if type(v) is not str:
                    raise Declined
                return v
            return text

        def bounded_text(v: Any) -> Any:
            if type(v) is not str or len(v) < least or not (v.isascii() or _utf8(v)) or (
                    match is not None and match(v) is None):
                raise Declined
            return v
        return bounded_text


@dataclass(frozen=True)
class Int:
    gt: int | None = None
    ge: int | None = None

    def check(self, models: dict[str, _Check]) -> _Check:
        gt, ge = self.gt, self.ge

        def integer(v: Any) -> Any:
            if type(v) is not int or (gt is not None and v <= gt) or (
                    ge is not None and v < ge):
                raise Declined
            return v
        return integer


@dataclass(frozen=True)
class Float:
    gt: float | None = None
    le: float | None = None

    def check(self, models: dict[str, _Check]) -> _Check:
        gt, le = self.gt, self.le

        def number(v: Any) -> Any:
            if type(v) is int:
                try:
                    f = float(v)
                except OverflowError:
                    raise Declined from None
            elif type(v) is float:
                f = v
            else:
                raise Declined
            if (gt is not None and not f > gt) or (le is not None and not f <= le):
                raise Declined  # NaN meets neither bound
            return v
        return number


@dataclass(frozen=True)
class Bool:
    def check(self, models: dict[str, _Check]) -> _Check:
        def flag(v: Any) -> Any:
            if type(v) is not bool:
                raise Declined
            return v
        return flag


@dataclass(frozen=True)
class OneOf:
    values: tuple[Any, ...]

    def check(self, models: dict[str, _Check]) -> _Check:
        texts = frozenset(x for x in self.values if type(x) is str)
        flags = [x for x in self.values if type(x) is bool]

        def one_of(v: Any) -> Any:
            if type(v) is str:
                if v in texts:
                    return v
            elif type(v) in (bool, int, float) and any(v == x for x in flags):
                return v
            raise Declined
        return one_of


@dataclass(frozen=True)
class ListOf:
    item: Any
    min_length: int = 0

    def check(self, models: dict[str, _Check]) -> _Check:
        item, least = self.item.check(models), self.min_length

        def items(v: Any) -> Any:
            if type(v) is not list or len(v) < least:
                raise Declined
            return [item(x) for x in v]
        return items


@dataclass(frozen=True)
class DictOf:
    key: Any
    value: Any

    def check(self, models: dict[str, _Check]) -> _Check:
        key, value = self.key.check(models), self.value.check(models)

        def mapping(v: Any) -> Any:
            if type(v) is not dict:
                raise Declined
            return {key(k): value(x) for k, x in v.items()}
        return mapping


@dataclass(frozen=True)
class AnyValue:
    def check(self, models: dict[str, _Check]) -> _Check:
        return lambda v: v


@dataclass(frozen=True)
class Nullable:
    inner: Any

    def check(self, models: dict[str, _Check]) -> _Check:
        inner = self.inner.check(models)
        return lambda v: None if v is None else inner(v)


@dataclass(frozen=True)
class Model:
    name: str

    def check(self, models: dict[str, _Check]) -> _Check:
        name = self.name
        return lambda v: models[name](v)  # looked up when called: models refer to each other


REQUIRED = object()


@dataclass(frozen=True)
class Field:
    """One model field: its YAML key, kind, default (REQUIRED: none) and field rules; the
    attribute is the key in snake case, as the models name it."""

    alias: str
    kind: Any
    default: Any = REQUIRED
    rules: tuple[Callable[[Any], Any], ...] = ()

    @property
    def attr(self) -> str:
        return self.alias.replace("-", "_")


# --- the schema (recipe/components.py, patches.py, rows.py, scenarios.py, master.py,
# runners.py) ------------------------------------------------------------------------------

_TEXT = Str(min_length=1)
_COUNT = Int(gt=0)
_GPUS = (rules.parallelism,)
_VERSION = Field("version", Nullable(_TEXT), None, (rules.not_an_image,))
_WORKER = (
    Field("tp", _COUNT, REQUIRED, _GPUS),
    Field("pp", _COUNT, 1, _GPUS),
    Field("dcp-size", _COUNT, 1, _GPUS),
    Field("pcp-size", _COUNT, 1, _GPUS),
    Field("ep", _COUNT, REQUIRED, _GPUS),
    Field("dp-attn", Bool()),
    Field("hardware", Nullable(_TEXT), None),
    Field("additional-settings", ListOf(Str()), [], (rules.key_value_settings,)),
)
_CONCURRENCY = (
    Field("srt-recipe", Nullable(_TEXT), None),
    Field("eval-srt-recipe", Nullable(_TEXT), None),
    Field("conc-start", Nullable(Int()), None),
    Field("conc-end", Nullable(Int()), None),
    Field("conc-list", Nullable(ListOf(Int())), None),
)
_SINGLE_NODE = (
    Field("tp", _COUNT, REQUIRED, _GPUS),
    Field("pp", _COUNT, 1, _GPUS),
    Field("dcp-size", _COUNT, 1, _GPUS),
    Field("pcp-size", _COUNT, 1, _GPUS),
    Field("ep", Nullable(_COUNT), None, _GPUS),
    Field("dp-attn", Nullable(Bool()), None),
    Field("spec-decoding", OneOf(SPEC_DECODINGS), "none"),
)
_MULTI_NODE = (
    Field("worker", Nullable(Model("AggregateWorker")), None),
    Field("prefill", Nullable(Model("Worker")), None),
    Field("decode", Nullable(Model("Worker")), None),
    Field("num-nodes", Nullable(_COUNT), None, (rules.node_count,)),
)
_ROUTER = Field("router", Nullable(Model("ComponentMetadata")), None)
_P2P = Field("kv-p2p-transfer", Nullable(_TEXT), None)
_BLOCK = (Field("isl", _COUNT, REQUIRED, (rules.prompt_tokens,)),
          Field("osl", _COUNT, REQUIRED, (rules.output_tokens,)),
          Field("require-power", Bool(), False))
_ENTRY = (
    Field("image", _TEXT),
    Field("model", _TEXT),
    Field("model-prefix", _TEXT),
    Field("runner", _TEXT),
    Field("precision", _TEXT),
    Field("framework", _TEXT),
    _ROUTER,
    _P2P,
    Field("patches", Nullable(ListOf(Model("EnginePatch"))), None),
)


def _scenarios(fixed_block: str) -> tuple[Field, ...]:
    return (Field("fixed-seq-len", Nullable(ListOf(Model(fixed_block))), None),
            Field("agentic-coding", Nullable(ListOf(Model("AgenticBlock"))), None))


# model name -> (fields, model rules), as the pydantic class of that name has them
SCHEMA: dict[str, tuple[tuple[Field, ...], tuple[Callable[[Any], Any], ...]]] = {
    "ComponentMetadata": ((Field("name", _TEXT), Field("version", _TEXT, REQUIRED,
                                                       (rules.not_an_image,))), ()),
    "KvOffloadBackend": ((
        Field("name", OneOf(KV_OFFLOAD_BACKENDS)),
        _VERSION,
        Field("size-gb-per-rank", Nullable(Float(gt=0)), None, (rules.host_gb_per_rank,)),
        Field("write-policy", Nullable(OneOf(WRITE_POLICIES)), None),
    ), (rules.backend_write_policy,)),
    "Worker": ((Field("num-worker", Int(ge=0), REQUIRED, (rules.worker_count,)), *_WORKER),
               (rules.check_dcp_divides_tp,)),
    "AggregateWorker": ((Field("num-worker", _COUNT, 1, (rules.worker_count,)), *_WORKER),
                        (rules.check_dcp_divides_tp,)),
    "EnginePatch": ((
        Field("id", Str(min_length=1, pattern=PATCH_ID_PATTERN)),
        Field("file", _TEXT, REQUIRED, (rules.patch_file,)),
        Field("anchor", _TEXT),
        Field("replacement", Str()),
        Field("upstream-fix", Nullable(_TEXT), None),
        Field("arms", ListOf(Str(), min_length=1), [ALL_ARMS], (rules.patch_arms,)),
        Field("source", Nullable(_TEXT), None),
    ), (rules.patch_changes_something,)),
    "FixedSingleNodeRow": ((*_CONCURRENCY, *_SINGLE_NODE, _ROUTER),
                           (rules.fixed_single_node_row,)),
    "FixedMultiNodeRow": ((*_CONCURRENCY, Field("spec-decoding", OneOf(SPEC_DECODINGS), "none"),
                           *_MULTI_NODE, _ROUTER, _P2P), (rules.fixed_multi_node_row,)),
    "AgenticRow": ((
        *_CONCURRENCY,
        Field("tp", Nullable(_COUNT), None, _GPUS),
        *_SINGLE_NODE[1:],
        *_MULTI_NODE,
        Field("kv-offloading", Nullable(OneOf(KV_OFFLOADINGS)), None),
        Field("kv-offload-backend", Nullable(Model("KvOffloadBackend")), None),
        _ROUTER,
        _P2P,
    ), (rules.agentic_row,)),
    "FixedSingleNodeBlock": ((*_BLOCK, Field("search-space", ListOf(Model(
        "FixedSingleNodeRow")))), (rules.power_shape,)),
    "FixedMultiNodeBlock": ((*_BLOCK, Field("search-space", ListOf(Model(
        "FixedMultiNodeRow")))), (rules.power_shape,)),
    "AgenticBlock": ((
        Field("search-space", ListOf(Model("AgenticRow"))),
        Field("dram-utilization", Nullable(Float(gt=0, le=1)), None),
    ), (rules.dram_needs_utilization,)),
    "SingleNodeScenarios": (_scenarios("FixedSingleNodeBlock"), (rules.some_scenario,)),
    "MultiNodeScenarios": (_scenarios("FixedMultiNodeBlock"), (rules.some_scenario,)),
    "SingleNodeMasterEntry": ((
        *_ENTRY,
        Field("multinode", OneOf((False,))),
        Field("disagg", OneOf((False,)), False),
        Field("scenarios", Model("SingleNodeScenarios")),
    ), (rules.master_entry,)),
    "MultiNodeMasterEntry": ((
        *_ENTRY,
        Field("multinode", OneOf((True,))),
        Field("disagg", Bool(), False),
        Field("scenarios", Model("MultiNodeScenarios")),
    ), (rules.master_entry,)),
    "RunnerHardware": ((Field("available-cpu-dram-mib", _COUNT, REQUIRED, (rules.host_mib,)),
                        Field("gpus-per-node", _COUNT, REQUIRED, (rules.gpus_per_node,))), ()),
    "Cluster": ((
        Field("gpus-per-node", _COUNT, REQUIRED, (rules.gpus_per_node,)),
        Field("available-cpu-dram-mib", Nullable(_COUNT), None, (rules.host_mib,)),
        Field("arch", OneOf(ARCHES)),
        Field("scheduler", _TEXT),
        Field("slurm", Nullable(DictOf(Str(), AnyValue())), None),
        Field("models", Nullable(DictOf(Str(), AnyValue())), None),
        Field("env", Nullable(DictOf(Str(), Str())), None),
    ), ()),
    "Runners": ((
        Field("labels", DictOf(Str(), ListOf(Str())), REQUIRED, (rules.runner_labels,)),
        Field("hardware", DictOf(Str(), Model("RunnerHardware")), {}),
        Field("clusters", DictOf(Str(), Model("Cluster")), {}),
    ), (rules.runners_layout,)),
}

# --- the interpreter ----------------------------------------------------------------------


class View:
    """A validated mapping as the rules read a model: its fields as attributes (defaults
    filled in), and `model_fields_set`, the fields the YAML gave."""

    model_fields_set: set[str]


def _model(fields: tuple[Field, ...], model_rules: tuple[_Check, ...],
           models: dict[str, _Check]) -> _Check:
    keys = frozenset(f.alias for f in fields)
    plan = [(f.alias, f.attr, f.kind.check(models), f.default, f.rules) for f in fields]

    def model(v: Any) -> Any:
        if type(v) is not dict or not keys.issuperset(v):  # extra="forbid"
            raise Declined
        view = View()
        attrs = view.__dict__
        given = set()
        for alias, attr, check, default, field_rules in plan:
            if alias in v:
                value = check(v[alias])
                for rule in field_rules:
                    rule(value)
                attrs[attr] = value
                given.add(attr)
            elif default is REQUIRED:
                raise Declined
            else:
                attrs[attr] = default
        view.model_fields_set = given
        for rule in model_rules:
            rule(view)
        return view
    return model


def _models() -> dict[str, _Check]:
    models: dict[str, _Check] = {}
    for name, (fields, model_rules) in SCHEMA.items():
        models[name] = _model(fields, model_rules, models)
    return models


_MODELS = _models()


def validated(model: str, value: Any) -> View | None:
    """`value` checked as the model of that name, or None where the plain schema declines
    (the model would refuse it, or might)."""
    try:
        return _MODELS[model](value)
    except Exception:  # Declined, a rule's ValueError, or anything unforeseen: decline
        return None


# --- whole files, as recipe/loader.py reads them ------------------------------------------


def plain_recipes(configs: Sequence[Path], runners: Path
                  ) -> tuple[list[tuple[str, Any, str]], RunnerFacts] | None:
    """(config key, raw entry, file) in file order and the runner facts, when every file
    reads without a problem and every entry and the runners file are accepted; None
    otherwise (the pydantic loader then reports every error)."""
    from kvbench.recipe.source import read_yaml

    entries: list[tuple[str, Any, str]] = []
    seen: dict[str, Path] = {}
    try:
        for path in configs:
            path = Path(path)
            data, problems = read_yaml(path)
            if problems or type(data) is not dict:
                return None
            for key, value in data.items():
                if rules.config_key_problem(key, seen) is not None:
                    return None
                seen[key] = path
                model = "MultiNodeMasterEntry" if rules.is_multinode_entry(value) else \
                    "SingleNodeMasterEntry"
                if validated(model, value) is None:
                    return None
                entries.append((key, value, str(path)))
        data, problems = read_yaml(Path(runners))
    except (RecipeError, OSError):
        return None
    view = validated("Runners", data) if not problems and type(data) is dict else None
    return None if view is None else (entries, RunnerFacts.of(view))
