"""Image modifications: what an InferenceX launcher or srt-slurm recipe changes in the engine
image before the server starts (a source edit, a pinned package, a system package, the
launcher's own patch script, a Dynamo build), read from `data/image.yaml`.

A row's modifications travel with its plan (`image-mods`) and launch spec; the launch stage
applies each the way the launcher does, or refuses it by name (launch/patcher.py). Nothing
here touches an image: this module only says what a row gets and with which source line.

Each modification is a plain mapping (kebab-case keys, as plan.json and the dry-run write
them): `id`, `kind`, `source` and the kind's fields (data/image.yaml's header)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench import yamldoc
from kvbench.errors import PlanError
from kvbench.plan.settings import When

DATA = Path(__file__).parent / "data" / "image.yaml"
KINDS = ("edit", "pip", "apt", "script", "build")
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)
# the fields each kind needs (besides kind and source)
_NEEDS = {"edit": ("file", "anchor", "replacement"), "pip": ("packages",),
          "apt": ("packages", "provides"), "script": ("path",), "build": ("what",)}
# srtctl installs Dynamo from NVIDIA's index (srt-slurm src/srtctl/core/schema.py
# DynamoConfig._build_install_commands: pip install --extra-index-url https://pypi.nvidia.com)
NVIDIA_INDEX = "https://pypi.nvidia.com"


class _Mod(BaseModel):
    model_config = _STRICT
    kind: Literal[KINDS]  # type: ignore[valid-type]
    source: str = Field(min_length=1)
    note: str | None = None
    file: str | None = None
    within: str | None = None
    anchor: str | None = None
    replacement: str | None = None
    upstream_fix: str | None = Field(None, alias="upstream-fix")
    packages: list[str] | None = None
    pip_args: list[str] | None = Field(None, alias="pip-args")
    provides: str | None = None
    path: str | None = None
    sha256: str | None = None
    what: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> _Mod:
        missing = [f for f in _NEEDS[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} modification needs {', '.join(missing)}")
        return self


class _When(When):
    """settings.When plus the engine release of the image and an srt recipe's setup script."""

    image_version: str | list[str] | None = Field(None, alias="image-version")
    setup_script: str | list[str] | None = Field(None, alias="setup-script")


class _Rule(BaseModel):
    model_config = _STRICT
    source: str
    when: _When
    mods: list[str] = Field(min_length=1)


class _File(BaseModel):
    model_config = _STRICT
    mods: dict[str, _Mod]
    rules: list[_Rule]


@cache
def _data() -> _File:
    try:
        parsed = _File.model_validate(yamldoc.load_file(DATA, "image modifications file",
                                                        PlanError))
    except ValueError as e:
        raise PlanError(f"invalid image modifications file {DATA}: {e}") from None
    unknown = {m for rule in parsed.rules for m in rule.mods} - set(parsed.mods)
    if unknown:
        raise PlanError(f"{DATA.name}: rules name modifications {sorted(unknown)} not under "
                        "mods:")
    return parsed


def mod(mod_id: str) -> dict[str, Any]:
    """One modification of data/image.yaml as a mapping (`id` first)."""
    found = _data().mods.get(mod_id)
    if found is None:
        raise PlanError(f"no image modification {mod_id!r} (allowed: "
                        f"{', '.join(sorted(_data().mods))})")
    return {"id": mod_id, **found.model_dump(by_alias=True, exclude_none=True)}


def all_mods() -> dict[str, dict[str, Any]]:
    return {i: mod(i) for i in _data().mods}


def rules() -> list[_Rule]:
    return list(_data().rules)


def image_mods(facts: dict[str, Any], *, multinode: bool = False,
               setup_script: str | None = None) -> list[dict[str, Any]]:
    """The modifications of a row: a single-node row's launcher rules match its `facts`
    (engine, model_prefix, hardware, precision, offload, dp_attn, tp, conc, spec_decoding,
    image_version); a multi-node row's worker gets its srt-slurm `setup_script`'s."""
    out: list[dict[str, Any]] = []
    facts = {**facts, "setup_script": setup_script}
    for rule in _data().rules:
        srt = rule.when.setup_script is not None
        if srt != multinode or not rule.when.matches(facts):
            continue
        for mod_id in rule.mods:
            if all(m["id"] != mod_id for m in out):
                out.append(mod(mod_id))
    return out


def dynamo_mods(dynamo: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The Dynamo an srt-slurm recipe installs before its workers start (srt-slurm
    src/srtctl/core/schema.py DynamoConfig: `version` and `wheel` pip-install ai-dynamo and
    ai-dynamo-runtime at that version, `hash` / `top_of_tree` build it from source;
    `install: false` keeps the image's). `where`: the recipe, for the source."""
    if dynamo.get("install") is False:
        return []
    source = f"{where} dynamo: (srt-slurm schema.py DynamoConfig.get_install_commands)"
    if dynamo.get("hash") or dynamo.get("top_of_tree"):
        commit = str(dynamo.get("hash") or "HEAD")
        return [{"id": f"dynamo-source-{commit[:12]}", "kind": "build", "source": source,
                 "what": f"Dynamo built from source at {commit} (git clone ai-dynamo/dynamo, "
                         "maturin build of lib/bindings/python, pip install -e)"}]
    version = dynamo.get("wheel") or dynamo.get("version")
    if not version:
        return []
    return [{"id": f"dynamo-{version}", "kind": "pip", "source": source,
             "packages": [f"ai-dynamo-runtime=={version}", f"ai-dynamo=={version}"],
             "pip-args": ["--extra-index-url", NVIDIA_INDEX]}]


def recipe_patch_mods(patches: list[dict[str, Any]] | None, config_key: str
                      ) -> list[dict[str, Any]]:
    """A kvbench recipe's own `patches:` entries (recipe/patches.py, kept readable for
    recipes written before image.yaml) as edit modifications."""
    keep = ("file", "anchor", "replacement", "upstream-fix")
    return [{"id": str(p["id"]), "kind": "edit",
             "source": p.get("source") or f"recipe patches: {config_key}",
             **{k: p[k] for k in keep if p.get(k) is not None}} for p in patches or []]


def resolved(mods: list[dict[str, Any]], checkout: Path | None) -> list[dict[str, Any]]:
    """The modifications with what the launch stage will do (`action`: apply, or refuse with
    the reason): a `script` is looked up in the row's InferenceX checkout (`checkout`, the
    benchmark folder of its master config) and its sha256 compared with the pin's; a
    `build` is always refused."""
    import hashlib

    out = []
    for m in mods:
        m = dict(m)
        if m["kind"] == "script":
            path = checkout / m["path"] if checkout is not None else None
            m["script-file"] = str(path) if path is not None else None
            if path is None or not path.is_file():
                m["action"] = (f"refuse: {m['path']} is not in the row's InferenceX checkout"
                               + (f" ({checkout})" if checkout is not None else ""))
            elif hashlib.sha256(path.read_bytes()).hexdigest() != m.get("sha256"):
                m["action"] = f"refuse: {path} is not the pinned file (sha256 differs)"
            else:
                m["action"] = "apply"
        elif m["kind"] == "build":
            m["action"] = f"refuse: kvbench does not build {m['what']}"
        else:
            m["action"] = "apply"
        out.append(m)
    return out


def describe(m: dict[str, Any]) -> str:
    """One line: what the modification does."""
    kind = m["kind"]
    if kind == "edit":
        return f"edit {m['file']}" + (f" (within {m['within']!r})" if m.get("within") else "")
    if kind in ("pip", "apt"):
        return f"{kind} install {' '.join(m['packages'])}"
    if kind == "script":
        return f"run {m['path']}"
    return f"build: {m['what']}"
