"""The plain schema (recipe/plain.py: `kvbench matrix`'s cold path, no pydantic) is held to
the pydantic models: the same fields, kinds, bounds, defaults and rule functions, read from
the models themselves; the same verdict, entry by entry, on every committed recipe and
runners file and on the fuzz suite's hostile edits of them; the same entries and runner
facts where both accept; and, where the plain schema declines, the loader's own errors."""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path

import pytest
import yaml
from fixtures.mutation import HOSTILE, leaf_paths, mutate
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from kvbench.errors import RecipeError
from kvbench.recipe import plain, rules
from kvbench.recipe.cache import load_recipes
from kvbench.recipe.loader import load_master_configs, load_runners
from kvbench.recipe.master import MultiNodeMasterEntry, SingleNodeMasterEntry
from kvbench.recipe.runners import Runners

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
# every committed set of master configs and the runners file they are read with
COMMITTED = [
    ([DATA / "inferencex" / "amd-master.yaml", DATA / "inferencex" / "nvidia-master.yaml"],
     DATA / "inferencex" / "runners.yaml"),
    ([DATA / "inferencex-e2e" / "configs" / "nvidia-master.yaml"],
     DATA / "inferencex-e2e" / "configs" / "runners.yaml"),
    ([REPO / "examples" / "quickstart.yaml", REPO / "examples" / "disagg.yaml"],
     REPO / "examples" / "runners.yaml"),
    ([REPO / "benchmarks" / "gpu" / "vllm" / "recipe.yaml"],
     REPO / "benchmarks" / "gpu" / "vllm" / "runners.yaml"),
    ([REPO / "benchmarks" / "gpu" / "sglang" / "recipe.yaml"],
     REPO / "benchmarks" / "gpu" / "vllm" / "runners.yaml"),
    ([REPO / "benchmarks" / "gpu" / "sglang" / "recipe-x2.yaml"],
     REPO / "benchmarks" / "gpu" / "sglang" / "runners-x2.yaml"),
]
# PyYAML's C loader, the same documents: read at collection, by every pytest-xdist worker
ENTRIES = [(key, value) for configs, _ in COMMITTED for path in configs
           for key, value in yaml.load(path.read_text(), Loader=yaml.CSafeLoader).items()]
RUNNERS_DOCS = [yaml.load(runners.read_text(), Loader=yaml.CSafeLoader)
                for _, runners in COMMITTED]


# --- the table against the models ---------------------------------------------------------

def _models(roots: tuple[type[BaseModel], ...]) -> dict[str, type[BaseModel]]:
    """Every model reachable from `roots` through field annotations, by class name."""
    out: dict[str, type[BaseModel]] = {}

    def walk(tp: object) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ not in out:
                out[tp.__name__] = tp
                for field in tp.model_fields.values():
                    walk(field.annotation)
            return
        for arg in typing.get_args(tp):
            walk(arg)

    for root in roots:
        walk(root)
    return out


MODELS = _models((SingleNodeMasterEntry, MultiNodeMasterEntry, Runners))


def _kind(tp: object, metadata: list) -> object:
    """A pydantic annotation and its constraints in the plain schema's vocabulary; an
    annotation outside it (a lax int, say) fails the test."""
    meta = {type(m).__name__: m for m in metadata}
    strict = "Strict" in meta and meta.pop("Strict").strict
    if typing.get_origin(tp) is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return _kind(base, [*metadata, *extra])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return plain.Nullable(_kind(inner, metadata))

    def take(name: str, attr: str) -> object:
        m = meta.pop(name, None)
        return getattr(m, attr) if m is not None else None

    if tp is str:
        kind: object = plain.Str(min_length=take("MinLen", "min_length") or 0,
                                 pattern=take("_PydanticGeneralMetadata", "pattern"))
    elif tp is int:
        assert strict, "the plain schema knows strict ints only"
        kind = plain.Int(gt=take("Gt", "gt"), ge=take("Ge", "ge"))
    elif tp is float:
        assert strict, "the plain schema knows strict floats only"
        kind = plain.Float(gt=take("Gt", "gt"), le=take("Le", "le"))
    elif tp is bool:
        assert strict, "the plain schema knows strict bools only"
        kind = plain.Bool()
    elif origin is typing.Literal:
        kind = plain.OneOf(args)
    elif origin is list:
        kind = plain.ListOf(_kind(args[0], []), min_length=take("MinLen", "min_length") or 0)
    elif origin is dict:
        kind = plain.DictOf(_kind(args[0], []), _kind(args[1], []))
    elif tp is typing.Any:
        kind = plain.AnyValue()
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        kind = plain.Model(tp.__name__)
    else:
        raise AssertionError(f"no plain kind for {tp!r}")
    assert not meta, f"constraints the plain schema does not state: {meta}"
    return kind


def _stated(cls: type[BaseModel]) -> tuple[list[tuple], tuple]:
    """The model as the plain table states one: its fields and its model rules."""
    decorators = cls.__pydantic_decorators__
    field_rules: dict[str, list] = {}
    for d in decorators.field_validators.values():
        assert d.info.mode == "after", d
        for name in d.info.fields:
            field_rules.setdefault(name, []).append(d.func)
    assert not decorators.field_serializers and not decorators.root_validators
    fields = []
    for name, info in cls.model_fields.items():
        if info.is_required():
            default = plain.REQUIRED
        elif info.default_factory is not None:
            default = info.default_factory()
        else:
            default = info.default
        fields.append((info.alias or name, name, _kind(info.annotation, info.metadata),
                       default, tuple(field_rules.pop(name, ()))))
    assert not field_rules
    model_rules = []
    for d in decorators.model_validators.values():
        assert d.info.mode == "after", d
        model_rules.append(d.func)
    return sorted(fields, key=lambda f: f[0]), tuple(model_rules)


def test_the_plain_table_states_every_model_field_and_rule():
    assert set(plain.SCHEMA) == set(MODELS)
    for name, cls in MODELS.items():
        assert cls.model_config.get("extra") == "forbid", name
        assert not cls.model_config.get("validate_by_name"), name
        fields, model_rules = plain.SCHEMA[name]
        table = sorted(((f.alias, f.attr, f.kind, f.default, f.rules) for f in fields),
                       key=lambda f: f[0])
        assert (table, model_rules) == _stated(cls), name


# --- the same verdict ---------------------------------------------------------------------

def _model_verdict(cls: type[BaseModel], value: object) -> bool:
    try:
        cls.model_validate(value)
    except ValidationError:
        return False
    return True


def _same_entry_verdict(value: object) -> bool:
    multinode = rules.is_multinode_entry(value)
    cls = MultiNodeMasterEntry if multinode else SingleNodeMasterEntry
    verdict = _model_verdict(cls, value)
    assert (plain.validated(cls.__name__, value) is not None) == verdict, value
    return verdict


def _same_runners_verdict(value: object) -> bool:
    verdict = _model_verdict(Runners, value)
    assert (plain.validated("Runners", value) is not None) == verdict, value
    return verdict


def test_every_committed_entry_and_runners_file_is_accepted_by_both():
    assert len(ENTRIES) > 200
    for _, value in ENTRIES:
        assert _same_entry_verdict(value)
    for doc in RUNNERS_DOCS:
        assert _same_runners_verdict(doc)


@pytest.mark.parametrize(("configs", "runners"), COMMITTED,
                         ids=[c[0].parent.name + "/" + c[0].name for c, _ in COMMITTED])
def test_committed_files_read_to_the_loaders_entries_and_facts(configs, runners):
    entries, facts = plain.plain_recipes(configs, runners)
    loaded = load_master_configs(configs)
    assert entries == [(k, e.raw, str(e.source)) for k, e in loaded.items()]
    assert facts == load_runners(runners).facts()


# Values near each field's bounds and the rules' cases: the fuzz suite's hostile values
# rarely land on an accepted one.
NEAR = st.sampled_from([
    None, True, False, 0, 1, 2, 3, 4, 8, 16, -1, 0.0, 0.5, 1.0, 1.5, 2.0, float("inf"),
    float("nan"), 10**400, "", "x", "image:x", "v1", "A=B", "=B", "AB", "none", "dram", "mtp",
    "draft_model", "hicache", "vllm-native", "write_back", "write_through", "cluster:x",
    "cluster:b300-nv", "partition:x", "x86_64", "slurm", "a/b.py", "/a.py", "a/../b.py",
    "all", "resident", "\ud800", "0", "true", [], [1], [0], [1, 2], [True], [1.0], ["A=B"],
    ["x"], ["all"], [{}], {}, {"name": "hicache"}, {"name": "vllm-native", "version": "v1"},
    {"name": "r", "version": "v1"}, {"num-worker": 1, "tp": 2, "ep": 2, "dp-attn": False},
    {"partition": "x"},
])
ALIASES = sorted({f.alias for fields, _ in plain.SCHEMA.values() for f in fields})
VALUES = st.one_of(NEAR, HOSTILE)


def _by_key(doc: object, out: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """Key -> the distinct values written under it anywhere in `doc`."""
    for k, v in (doc.items() if isinstance(doc, dict) else enumerate(doc)
                 if isinstance(doc, list) else ()):
        if isinstance(k, str):
            out.setdefault(k, {})[repr(v)] = v
        _by_key(v, out)
    return out


# what each key holds elsewhere in the committed files: the edits most likely to stay valid
# and meet the rules across fields
BY_KEY = {k: list(v.values()) for k, v in _by_key([[e for _, e in ENTRIES], RUNNERS_DOCS],
                                                   {}).items()}
FUZZ = settings(max_examples=700, deadline=None, derandomize=True, database=None,
                phases=(Phase.explicit, Phase.generate),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _swapped(doc: object, data: st.DataObject) -> object:
    """`doc` with one value replaced by one its key holds elsewhere."""
    doc = copy.deepcopy(doc)
    paths = [p for p in leaf_paths(doc) if p[-1] in BY_KEY]
    if not paths:
        return doc
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = copy.deepcopy(data.draw(st.sampled_from(BY_KEY[path[-1]])))
    return doc


def _edited(doc: object, data: st.DataObject) -> object:
    for _ in range(data.draw(st.sampled_from([1, 1, 2, 3]))):
        if not leaf_paths(doc):
            break
        doc = data.draw(st.sampled_from([
            lambda d: mutate(d, data)[0],  # the fuzz suite's edit, as it makes them
            lambda d: mutate(d, data, values=VALUES, new_keys=ALIASES)[0],
            lambda d: _swapped(d, data),
        ]))(doc)
    return doc


@FUZZ
@given(data=st.data())
def test_edited_entries_get_the_same_verdict(data):
    _, entry = data.draw(st.sampled_from(ENTRIES))
    _same_entry_verdict(_edited(entry, data))


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_edited_runners_files_get_the_same_verdict(data):
    doc = data.draw(st.sampled_from(RUNNERS_DOCS))
    _same_runners_verdict(_edited(doc, data))


# --- what the plain schema declines, the loader reports -----------------------------------

ONE = DATA / "inferencex" / "nvidia-master.yaml"


def _first_key(text: str) -> str:
    return next(line for line in text.splitlines() if line and line[0] not in " #")


@pytest.mark.parametrize("edit", [
    "duplicate key", "glob key", "key twice", "not a mapping", "bad entry", "bad runners",
    "missing runners",
])
def test_what_the_plain_schema_declines_the_loader_reports(edit, tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    text = ONE.read_text()
    first = _first_key(text)
    master, other = tmp_path / "master.yaml", tmp_path / "other.yaml"
    runners = tmp_path / "runners.yaml"
    master.write_text(text)
    other.write_text("")
    runners.write_text((DATA / "inferencex" / "runners.yaml").read_text())
    configs = [master]
    if edit == "duplicate key":
        master.write_text(text.replace("\n  image:", "\n  image: again\n  image:", 1))
    elif edit == "glob key":
        master.write_text(text.replace(first, "qwen*:", 1))
    elif edit == "key twice":
        doc = yaml.safe_load(text)
        key = next(iter(doc))
        other.write_text(yaml.safe_dump({key: doc[key]}))
        configs = [master, other]
    elif edit == "not a mapping":
        master.write_text("- a list\n")
    elif edit == "bad entry":
        master.write_text(text.replace("tp: 2", "tp: two", 1))
    elif edit == "bad runners":
        runners.write_text(runners.read_text().replace("gpus-per-node: 8", "gpus-per-node: 0",
                                                       1))
    else:
        runners.unlink()
    assert plain.plain_recipes(configs, runners) is None
    with pytest.raises(RecipeError) as info:
        load_recipes(configs, runners)
    with pytest.raises(RecipeError) as reference:
        load_master_configs(configs)
        load_runners(runners)
    assert info.value.errors == reference.value.errors
