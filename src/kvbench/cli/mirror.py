"""`kvbench recipe mirror`: offload twins of GPU-resident agentic rows, written into the
master YAML in place, with the perf-changelog entry that triggers their sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.selection import SelectionCommand
from kvbench.errors import RecipeError

recipe_app = typer.Typer(help="Edit master configs: mirror offload arms.",
                         no_args_is_help=True)
app.add_typer(recipe_app, name="recipe")

CHANGELOG_NAME = "perf-changelog.yaml"


def _changelog_path(config: Path) -> Path:
    """perf-changelog.yaml in the working directory, beside the config or one level up
    (the InferenceX layout keeps configs/ under the repository root)."""
    for d in (Path.cwd(), config.resolve().parent, config.resolve().parent.parent):
        if (d / CHANGELOG_NAME).is_file():
            return d / CHANGELOG_NAME
    raise RecipeError(f"no {CHANGELOG_NAME} found in the working directory, beside {config} "
                      f"or above it", hint="pass --changelog PATH (or --no-changelog)")


def _files_by_key(config_files: list[Path], keys: list[str]) -> dict[Path, list[str]]:
    from kvbench import yamldoc

    where: dict[Path, list[str]] = {}
    missing = list(keys)
    for path in config_files:
        found = yamldoc.load_file(path, "master config", RecipeError) or {}
        if not isinstance(found, dict):
            raise RecipeError(f"{path}: a master config maps config keys to entries, not a "
                              f"{type(found).__name__}")
        for key in [k for k in missing if k in found]:
            where.setdefault(path, []).append(key)
            missing.remove(key)
    if missing:
        raise RecipeError(f"config key(s) {', '.join(missing)} are in none of "
                          f"{', '.join(map(str, config_files))}",
                          hint="pass --config-files with the master file that defines them")
    return where


def _validated(path: Path, text: str, runners_path: Path) -> None:
    """The edited file must load and budget-check exactly as `kvbench validate` does."""
    import tempfile

    from kvbench.cli.validate_fast import _budget_errors
    from kvbench.recipe.loader import master_config_errors, runners_errors

    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".yaml", delete=True) as tmp:
        tmp.write(text)
        tmp.flush()
        entries, errors = master_config_errors([Path(tmp.name)])
        runners, found = runners_errors(runners_path)
        errors += found + (_budget_errors(entries, runners) if runners else [])
    if errors:
        raise RecipeError(f"{path}: the mirrored file would not validate; nothing written",
                          errors=[e.replace(tmp.name, str(path)) for e in errors])


def _print_outcomes(outcomes: list, backend: str) -> None:
    for o in outcomes:
        if o.status == "added":
            sizes = sorted(set(o.host_gb_per_rank))
            size = "/".join(f"{s:,.1f}" for s in sizes)
            print(f"added    {o.where} (line {o.line}): {backend} twin, {len(o.exp_names)} "
                  f"job(s), planned host pools {size} GB per rank")
            for line in o.settings:
                print(f"           runs {line}")
        elif o.status == "refused":
            print(f"refused  {o.where} (line {o.line}): not written")
            for reason in o.reasons:
                print(f"           {reason}")
        else:
            print(f"present  {o.where} (line {o.line}): already has a {backend} twin")


def _description(added: int, refused: int, backend: str, size: float | None,
                 patched: list[tuple[str, str]] | None = None) -> list[str]:
    rows = f"{added} GPU-resident agentic row{'s' * (added != 1)}"
    sized = (f"{size:g} GB per rank (size-gb-per-rank)" if size is not None
             else "the host pool sized by the planner from the row's DRAM budget")
    lines = [f"Mirror {rows} with a {backend} DRAM-offload arm: same parallelism, speculative "
             f"decoding and concurrency list; {sized}."]
    if refused:
        lines.append(f"{refused} resident row{'s' * (refused != 1)} not mirrored: the planner "
                     f"refused the offload arm.")
    for key, pid in patched or []:
        lines.append(f"{key}: engine patch {pid} for the {backend} arms (the image needs it).")
    return lines


@recipe_app.command("mirror", cls=SelectionCommand)
def mirror(
    config_keys: Annotated[list[str], typer.Option(help="Config keys to mirror.")],
    backend: Annotated[str, typer.Option(help="Offload backend of the new arms.")] = "hicache",
    size: Annotated[float | None, typer.Option(
        help="Host pool GB per rank, written as size-gb-per-rank (default: planner's).")] = None,
    config_files: Annotated[list[Path] | None, typer.Option(
        help="Master config YAML files (default: configs/*master*.yaml, *-master.yaml).")] = None,
    runner_config: Annotated[Path | None, typer.Option(
        help="runners.yaml (default: beside the config file).")] = None,
    changelog: Annotated[Path | None, typer.Option(
        help=f"The perf changelog to append to (default: {CHANGELOG_NAME} here, beside the "
             "config or above it).")] = None,
    no_changelog: Annotated[bool, typer.Option("--no-changelog",
                                               help="Do not append a changelog entry.")] = False,
    pr_link: Annotated[str | None, typer.Option(help="The entry's pr-link (default: the "
                                                     "placeholder).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run",
                                          help="Print the diff; write nothing.")] = False,
) -> None:
    """Add an offload twin under every GPU-resident agentic row of the keys (planned first;
    refused twins are reported, not written), print the diff, append the changelog entry."""
    import difflib

    from kvbench.authoring import mirror_text
    from kvbench.changelog.append import appended
    from kvbench.changelog.check import check_change
    from kvbench.changelog.entry import PR_LINK_PLACEHOLDER, ChangelogEntry
    from kvbench.changelog.keys import default_config_files, known_config_keys
    from kvbench.files import write_atomic
    from kvbench.recipe import load_runners

    if size is not None and size <= 0:
        raise RecipeError(f"--size {size:g} must be a positive number of GB per rank")
    files = list(config_files or default_config_files(None))
    edits: dict[Path, tuple[str, str]] = {}
    outcomes = []
    patched: list[tuple[str, str]] = []
    for path, keys in _files_by_key(files, config_keys).items():
        runners_path = runner_config or path.parent / "runners.yaml"
        if not runners_path.is_file():
            raise RecipeError(f"no runners file {runners_path}", hint="pass --runner-config")
        old = path.read_text()
        result = mirror_text(old, str(path), keys, backend, load_runners(runners_path), size)
        outcomes += result.outcomes
        patched += result.patched
        for key, pid in result.patched:
            print(f"patched  {key}: patches: {pid} (the image of its {backend} twins needs it)")
        for line in result.warnings:
            print(f"warning: {line}")
        if result.added:
            _validated(path, result.text, runners_path)
            edits[path] = (old, result.text)
    _print_outcomes(outcomes, backend)
    added = sum(o.status == "added" for o in outcomes)
    refused = sum(o.status == "refused" for o in outcomes)
    for path, (old, new) in edits.items():
        print("".join(difflib.unified_diff(old.splitlines(keepends=True),
                                           new.splitlines(keepends=True),
                                           f"a/{path}", f"b/{path}")), end="")
    if not edits:
        print("nothing to add: no resident row without a twin was planned to fit")
        return
    log_path = None if no_changelog else changelog or _changelog_path(next(iter(edits)))
    log_text = None
    if log_path is not None:
        entry = ChangelogEntry(**{
            "config-keys": list(dict.fromkeys(o.config_key for o in outcomes
                                              if o.status == "added")),
            "scenario-type": ["agentic-coding"],
            "description": _description(added, refused, backend, size, patched),
            "pr-link": pr_link or PR_LINK_PLACEHOLDER})
        base = log_path.read_text()
        log_text = appended(base, entry)
        # the keys the entry names exist in the edited files; check what will be written
        check_change(base.encode(), log_text.encode(), known_config_keys(files))
    if dry_run:
        print("dry run: nothing written")
        return
    for path, (_, new) in edits.items():
        write_atomic(path, new)
        print(f"wrote {path}")
    if log_path is not None and log_text is not None:
        write_atomic(log_path, log_text)
        print(f"appended a changelog entry to {log_path}")
