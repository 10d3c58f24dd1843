"""Load and validate master configs and runners files, reporting every error at once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kvbench.errors import RecipeError
from kvbench.recipe.base import restore_plugin_setting
from kvbench.recipe.master import MasterEntry, MultiNodeMasterEntry, SingleNodeMasterEntry
from kvbench.recipe.rules import config_key_problem, is_multinode_entry
from kvbench.recipe.runners import Runners
from kvbench.recipe.source import LineFinder, read_yaml

restore_plugin_setting()  # every recipe model is built by now (imports above)

_cache: dict[tuple, Any] = {}


def _stamp(paths: Sequence[Path]) -> tuple:
    out = []
    for p in paths:
        try:
            st = Path(p).stat()
            out.append((str(Path(p).resolve()), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(p), None, None))
    return tuple(out)


def _entry_class(value: Any) -> type[BaseModel]:
    return MultiNodeMasterEntry if is_multinode_entry(value) else SingleNodeMasterEntry


def _validate_entry(
    key: str, value: Any, lines: LineFinder, errors: list[str]
) -> MasterEntry | None:
    """The validated entry (remembering its raw mapping and file), or None with errors."""
    cls = _entry_class(value)
    try:
        entry = cls.model_validate(value)
    except ValidationError as e:
        from kvbench.recipe.diagnostics import messages  # only files with errors need it

        errors.extend(messages(cls, e, key, lambda loc: lines.where((key, *loc))))
        return None
    entry._raw = value  # type: ignore[union-attr]
    entry._source = lines.path  # type: ignore[union-attr]
    return entry  # type: ignore[return-value]


def _master_file(
    path: Path, seen: dict[str, Path], out: dict[str, MasterEntry], errors: list[str]
) -> None:
    try:
        data, problems = read_yaml(path)
    except RecipeError as e:
        errors.append(e.message)
        return
    errors.extend(problems)
    if not isinstance(data, dict):
        errors.append(f"{path}: a master config is a mapping of config key -> entry "
                      f"(got {type(data).__name__})")
        return
    lines = LineFinder(path)
    for key, value in data.items():
        if problem := config_key_problem(key, seen):
            errors.append(f"{lines.where((key,))}: {problem}")
            continue
        seen[key] = path
        entry = _validate_entry(key, value, lines, errors)
        if entry is not None:
            out[key] = entry


def master_config_errors(paths: Sequence[Path]) -> tuple[dict[str, MasterEntry], list[str]]:
    """Validate every entry of every file; return the valid entries and every error line."""
    out: dict[str, MasterEntry] = {}
    errors: list[str] = []
    seen: dict[str, Path] = {}
    for path in paths:
        _master_file(Path(path), seen, out, errors)
    return out, errors


def raise_all(errors: list[str], what: str) -> None:
    if errors:
        total = f"{len(errors)} errors in {what}" if len(errors) > 1 else None
        raise RecipeError(errors[0], errors=errors, hint=total)


def load_master_configs(paths: Sequence[Path]) -> dict[str, MasterEntry]:
    """Config key -> validated entry, in file order; RecipeError lists ALL errors of all
    files. Results are cached per (path, mtime, size)."""
    if not paths:
        raise RecipeError("no master config files given", hint="pass --config-files FILE...")
    stamp = ("master", _stamp(paths))
    if stamp not in _cache:
        entries, errors = master_config_errors(paths)
        raise_all(errors, ", ".join(str(p) for p in paths))
        _cache[stamp] = entries
    return dict(_cache[stamp])


def runners_errors(path: Path) -> tuple[Runners | None, list[str]]:
    try:
        data, problems = read_yaml(path)
    except RecipeError as e:
        return None, [e.message]
    if not isinstance(data, dict):
        return None, [*problems, f"{path}: a runners file is a mapping with 'labels' and "
                                 f"'hardware' (got {type(data).__name__})"]
    lines = LineFinder(Path(path))
    try:
        runners = Runners.model_validate(data)
    except ValidationError as e:
        from kvbench.recipe.diagnostics import messages

        return None, [*problems, *(
            line.replace(": runners.", ": ", 1)
            for line in messages(Runners, e, "runners", lines.where)
        )]
    return runners, problems


def load_runners(path: Path) -> Runners:
    """The validated runners.yaml; RecipeError lists all its errors."""
    stamp = ("runners", _stamp([path]))
    if stamp not in _cache:
        runners, errors = runners_errors(Path(path))
        raise_all(errors, str(path))
        _cache[stamp] = runners
    return _cache[stamp]
