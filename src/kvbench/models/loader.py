"""Find a model profile by HF id, alias or local config.json path."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from kvbench.errors import ModelError
from kvbench.models.profile import ModelProfile

DATA_DIR = Path(__file__).parent / "data"
# Quantisation and packaging suffixes that do not change the architecture.
_SUFFIX = re.compile(
    r"(-(fp8|fp4|nvfp4|mxfp4|mxfp8|int4|int8|awq|gptq|bf16)(-v\d+)?|-(instruct|base|\d{4}))+$"
)


def _key(name: str) -> str:
    base = name.strip().rstrip("/").split("/")[-1].lower()
    return _SUFFIX.sub("", base)


@cache
def _profiles() -> dict[str, ModelProfile]:
    out: dict[str, ModelProfile] = {}
    for path in sorted(DATA_DIR.glob("*.yaml")):
        try:
            profile = ModelProfile.model_validate(yaml.safe_load(path.read_text()))
        except (ValidationError, yaml.YAMLError) as e:
            raise ModelError(f"{path}: invalid model profile: {e}") from e
        out[path.stem] = profile
    return out


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for stem, p in _profiles().items():
        for name in [stem, p.name, *p.hf_ids, *p.aliases]:
            index.setdefault(name.lower(), stem)
            index.setdefault(_key(name), stem)
    return index


@cache
def _shipped_shapes() -> frozenset[str]:
    """The architectures `kvbench dummy-model` ships as config.json (data/hf-config/)."""
    return frozenset(p.stem for p in (DATA_DIR / "hf-config").glob("*.json"))


@cache
def _shipped_profile(shape: str) -> ModelProfile:
    """A shipped config.json that no profile YAML describes (a scaled-down architecture
    served with dummy weights): its profile is read from the file itself, named by the shape
    (a recipe names it `kvbench/<shape>`, the served model name)."""
    from kvbench.models.config_json import profile_from_config

    return profile_from_config(DATA_DIR / "hf-config" / f"{shape}.json", name=shape)


def model_names() -> list[str]:
    return sorted([*(p.name for p in _profiles().values()),
                   *(s for s in _shipped_shapes() if s not in _profiles())])


def load_model(name_or_path: str) -> ModelProfile:
    """A shipped profile by HF id (quantisation suffixes ignored) or alias, or a config.json."""
    path = Path(name_or_path)
    if path.name == "config.json" or path.suffix == ".json" or path.is_dir():
        if path.is_dir():
            path = path / "config.json"
        if path.is_file():
            from kvbench.models.config_json import profile_from_config

            return profile_from_config(path)
        raise ModelError(f"model config {str(path)!r} does not exist")
    index = _index()
    stem = index.get(name_or_path.lower()) or index.get(_key(name_or_path))
    if stem is None and _key(name_or_path) in _shipped_shapes():
        return _shipped_profile(_key(name_or_path))
    if stem is None:
        raise ModelError(
            f"no model profile for {name_or_path!r}; known: {', '.join(model_names())}",
            hint=f"pass the path of the checkpoint's config.json, or add a profile YAML to "
            f"{DATA_DIR} (copy one of the same architecture and record the source of each "
            "number under `sources:`)",
        )
    return _profiles()[stem]
