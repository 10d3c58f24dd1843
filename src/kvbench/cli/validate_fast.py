"""`kvbench validate`'s work, without typer: the short path (cli/fast.py) and the typer
command (cli/recipe.py) both call `run_validate`."""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.errors import RecipeError


def _is_runners_file(path: Path) -> bool:
    """runners.yaml has top-level `labels` and `hardware` or `clusters`; master configs never
    do (their top-level keys are config keys). Undecodable text is still sniffed, so that the file's
    error says which kind of file it is."""
    if path.name.startswith("runners"):
        return True
    return any(line.startswith(("labels:", "hardware:", "clusters:"))
               for line in _head(path).splitlines())


def _head(path: Path) -> str:
    """The first MiB of a regular file, any encoding ('' for a device, a FIFO or what cannot
    be read: the file's own reader then names the problem, without blocking on it)."""
    try:
        if not path.is_file():
            return ""
        with path.open("rb") as f:
            return f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _is_changelog_file(path: Path) -> bool:
    """perf-changelog.yaml sits beside the master configs (so `configs/*.yaml` names it): a
    top-level list, where a master config and a runners file are mappings."""
    if path.name.startswith("perf-changelog"):
        return True
    lines = _head(path).splitlines()
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    return first.startswith("- ")


def _budget_errors(entries: dict, runners: object) -> list[str]:
    """Cross-file rule: every `dram` row gets a budget from runners.yaml."""
    from kvbench.errors import KvbenchError
    from kvbench.matrix.budget import agentic_budget_gb

    errors = []
    for key, entry in entries.items():
        for b, block in enumerate(entry.raw["scenarios"].get("agentic-coding") or []):
            for r, row in enumerate(block["search-space"]):
                try:
                    agentic_budget_gb(block, row, entry.raw["runner"], runners)
                except KvbenchError as e:
                    errors.append(f"{entry.source}: {key}.agentic-coding[{b}].search-space[{r}]:"
                                  f" {e.message}")
    return errors


def _recipe_files(files: list[Path]) -> list[Path]:
    """The files that may be master configs or runners files; every other file or folder
    of a checkout's configs/ is named with what it is and skipped."""
    from kvbench.recipe.layout import NOT_RECIPES, kind_of

    out: list[Path] = []
    for path in files:
        kind = kind_of(path)
        if kind is None and path.is_file() and _is_changelog_file(path):
            kind = "changelog"
        if kind is None and path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")
                            or p.is_dir() or p.suffix == ".md")
            out.extend(_recipe_files(inside))
            continue
        if kind is None:
            out.append(path)
            continue
        print(f"skip {path}{'/' if path.is_dir() else ''} "
              f"({NOT_RECIPES[kind].format(path=path)})")
    return out


def _default_files() -> list[Path]:
    from kvbench.recipe.layout import find_checkout

    checkout = find_checkout()
    if checkout is None:
        raise RecipeError("no files given and no InferenceX checkout here (configs/runners.yaml"
                          " or inferencex-e2e/configs/runners.yaml)",
                          hint="kvbench validate configs/*.yaml, or run it from a checkout root")
    return [*checkout.master_configs(), checkout.runners]


def run_validate(files: list[Path]) -> None:
    """Validate `files` (default: the checkout's recipes and runners file): an `ok` line per
    valid file, every error of every file at once (exit 2)."""
    from kvbench.recipe.layout import find_checkout
    from kvbench.recipe.legacy import recipe_setting_warnings, retiring_validation
    from kvbench.recipe.loader import master_config_errors, runners_errors

    files = _recipe_files(files or _default_files())
    runner_files = [f for f in files if _is_runners_file(f)]
    config_files = [f for f in files if f not in runner_files]
    entries, errors = master_config_errors(config_files) if config_files else ({}, [])
    runners = None
    for path in runner_files:
        loaded, found = runners_errors(path)
        errors.extend(found)
        runners = loaded or runners
    if runners is None and config_files and not runner_files:
        beside = config_files[0].parent / "runners.yaml"
        if beside.is_file():
            runners, found = runners_errors(beside)
            errors.extend(found)
    checkout = find_checkout(config_files[0].absolute().parent) if config_files else None
    retired_by = retiring_validation(checkout.base) if checkout is not None else None
    for warning in recipe_setting_warnings(entries, retired_by) if retired_by else []:
        print(f"warning: {warning}", file=sys.stderr)
    if runners is not None:
        errors.extend(_budget_errors(entries, runners))
        for key, entry in entries.items():
            if entry.runner not in runners.labels:
                # The reference tolerates this (the row still generates), but no runner
                # label means no machine will ever pick the job up.
                print(f"warning: {entry.source}: {key}.runner: {entry.runner!r} is not a label "
                      "in runners.yaml", file=sys.stderr)
    bad = {str(f) for f in files if any(e.startswith(f"{f}:") for e in errors)}
    for path in files:
        if str(path) not in bad:
            what = "runners file" if path in runner_files else "master config"
            print(f"ok  {path} ({what})")
    if errors:
        raise RecipeError(
            errors[0], errors=errors,
            hint=f"{len(errors)} error(s) in {len(bad) or len(files)} file(s)" if len(errors) > 1
            else None,
        )
    print(f"{len(entries)} config keys valid")
