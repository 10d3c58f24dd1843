"""Validated recipes cached by content hash: what `kvbench matrix` and the commands that
select jobs read, without parsing YAML or importing the schema when nothing changed.

The key is a SHA-256 over this cache's format, the recipe package's own source files (name,
size, mtime: a schema change invalidates), and each input file's resolved path and bytes, so
any edit to a master config or runners.yaml is a miss. A miss validates with the plain schema
(recipe/plain.py, no pydantic), or where it declines with the full loader (every error
reported as before), and stores the raw entries and the runner facts with `marshal`
(builtins only). Under ~/.cache/kvbench/recipes (XDG_CACHE_HOME, or
KVBENCH_CACHE_DIR); KVBENCH_NO_CACHE=1 turns it off. A cache that cannot be read or written
is ignored: it only ever saves time."""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.errors import RecipeError
from kvbench.files import read_bounded
from kvbench.recipe.facts import RunnerFacts
from kvbench.recipe.layout import NO_FILES_HINT
from kvbench.units import MiB

# yamldoc.MAX_FILE_BYTES, named here so that a warm run does not import PyYAML
MAX_FILE_BYTES = 64 * MiB

FORMAT = b"kvbench-recipes-2"
_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class CachedEntry:
    """A validated master-config entry as the matrix stage reads it."""

    raw: dict[str, Any]
    source: Path


def cache_dir() -> Path | None:
    if os.environ.get("KVBENCH_NO_CACHE"):
        return None
    if explicit := os.environ.get("KVBENCH_CACHE_DIR"):
        return Path(explicit)
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "kvbench" / "recipes"


def _key(paths: Sequence[Path]) -> tuple[str, list[bytes]]:
    h = hashlib.sha256(FORMAT)
    for src in sorted(_PACKAGE.glob("*.py")):
        st = src.stat()
        h.update(f"{src.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    contents = []
    for path in paths:
        try:
            # bounded: a device, FIFO or oversized file is the loader's to refuse, on the miss
            data = read_bounded(path, MAX_FILE_BYTES, "YAML file", RecipeError)
        except (RecipeError, OSError):
            data = b""
        contents.append(data)
        h.update(os.path.abspath(path).encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest(), contents


def _validated(configs: Sequence[Path], runners: Path) -> dict:
    """The plain schema's reading (recipe/plain.py: no pydantic), or where it declines, the
    full loader's, which raises every error."""
    from kvbench.recipe.plain import plain_recipes

    plain = plain_recipes(configs, runners)
    if plain is not None:
        entries, facts = plain
    else:
        from kvbench.recipe.loader import load_master_configs, load_runners

        validated = load_master_configs(list(configs))
        facts = load_runners(runners).facts()
        entries = [(k, e.raw, str(e.source)) for k, e in validated.items()]
    # each entry's file as an absolute path (the key is over absolute paths): a cached entry
    # read from another working directory still names its file
    return {"entries": [(k, raw, os.path.abspath(src)) for k, raw, src in entries],
            "runners": facts.to_json()}


def load_recipes(configs: Sequence[Path], runners: Path
                 ) -> tuple[dict[str, CachedEntry], RunnerFacts]:
    """Config key -> entry (file order) and the runner facts; RecipeError lists every error
    of the files when they are invalid (never cached)."""
    if not configs:
        raise RecipeError("no master config files given", hint=NO_FILES_HINT)
    configs = [Path(p) for p in configs]
    folder = cache_dir()
    data = None
    if folder is not None:
        key, _ = _key([*configs, Path(runners)])
        path = folder / f"{key}.marshal"
        try:
            data = marshal.loads(path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            data = None
    if data is None:
        data = _validated(configs, Path(runners))
        if folder is not None:
            _store(folder / f"{key}.marshal", data)
    entries = {k: CachedEntry(raw, Path(src)) for k, raw, src in data["entries"]}
    return entries, RunnerFacts.from_json(data["runners"])


def _store(path: Path, data: dict) -> None:
    try:
        blob = marshal.dumps(data)
    except ValueError:  # a YAML value marshal cannot hold (a date): just do not cache
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        pass
