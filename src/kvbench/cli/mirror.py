"""`kvbench recipe mirror`: offload twins of GPU-resident agentic rows, written into the
master YAML in place, the launcher branch that runs them, and the perf-changelog entry that
triggers their sweep: what an upstream offload-arm pull request contains."""

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


def _description(outcomes: list, arms: list, backend: str) -> list[str]:
    """The entry's lines, in the seed's manner: what was added, how the arms run, the fix."""
    added = [o for o in outcomes if o.status == "added"]
    refused = sum(o.status == "refused" for o in outcomes)
    keys = list(dict.fromkeys(o.config_key for o in added))
    rows = f"{len(added)} GPU-resident agentic row{'s' * (len(added) != 1)}"
    lines = [f"Add {backend} DRAM KV-offload arms mirroring {rows} of {', '.join(keys)}: same "
             f"parallelism, speculative decoding and concurrency list."]
    for key_arm in arms:
        what = key_arm.text
        flags = dict(what.flags)
        parts = [f"page size {what.page_size}"] if what.page_size else []
        parts += [f"{flags[f]} {name}" for f, name in (
            ("--hicache-io-backend", "io-backend"), ("--hicache-mem-layout", "layout"),
            ("--hicache-write-policy", "write policy")) if f in flags]
        if key_arm.arm is not None:
            cap = (f" at a {what.cap_gb_per_rank:g} GB per-rank ceiling"
                   if what.cap_gb_per_rank is not None else "")
            lines.append(f"Run the {backend} arms at {', '.join(parts)}, sized in the launcher "
                         f"from the workflow DRAM budget{cap}.")
        if what.patch and key_arm.arm is not None:
            lines.append(f"Apply {what.patch['id']} ({what.patch.get('source', '')}) in the "
                         f"launcher for the {backend} arms only.")
    if refused:
        lines.append(f"{refused} resident row{'s' * (refused != 1)} not mirrored: the planner "
                     f"refused the offload arm.")
    return lines


def _checkout_root(config: Path) -> Path:
    """The checkout a master config belongs to: the parent of its configs/ folder."""
    parent = config.resolve().parent
    return parent.parent if parent.name == "configs" else parent


def _launcher_edits(arms: list, config: Path) -> dict[Path, tuple[str, str]]:
    from kvbench.authoring.launcher import add_arm, has_arm, launcher_path

    edits: dict[Path, tuple[str, str]] = {}
    for key_arm in arms:
        if key_arm.arm is None:
            continue
        path = launcher_path(_checkout_root(config), key_arm.entry, key_arm.facts.get("hardware"),
                             _spec(key_arm.entry))
        if path is None:
            print(f"warning: {key_arm.config_key}: no launcher found under "
                  f"{_checkout_root(config)}/benchmarks/single_node/agentic/: the rows are "
                  f"written, the launcher change is not")
            continue
        old = edits[path][1] if path in edits else path.read_text()
        if has_arm(old, key_arm.text.backend):
            print(f"launcher {path}: already runs {key_arm.text.backend} arms; unchanged")
            continue
        edits[path] = (edits[path][0] if path in edits else old,
                       add_arm(old, str(path), key_arm.arm, key_arm.text))
        print(f"launcher {path}: {key_arm.text.backend} branch added ({key_arm.arm.source})")
    return edits


def _spec(entry: dict) -> str:
    blocks = (entry.get("scenarios") or {}).get("agentic-coding") or []
    specs = {r.get("spec-decoding", "none") for b in blocks for r in b.get("search-space") or []}
    return "mtp" if "mtp" in specs else "none"


@recipe_app.command("mirror", cls=SelectionCommand)
def mirror(
    config_keys: Annotated[list[str], typer.Option(help="Config keys to mirror.")],
    backend: Annotated[str, typer.Option(help="Offload backend of the new arms.")] = "hicache",
    size: Annotated[float | None, typer.Option(
        help="Cap on the host pool GB per rank, written into the launcher's offload branch "
             "(default: the key's practice, else the launcher's budget arithmetic).")] = None,
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
    refused twins are reported, not written), the launcher branch that runs them, print the
    diffs, append the changelog entry."""
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
    arms: list = []
    for path, keys in _files_by_key(files, config_keys).items():
        runners_path = runner_config or path.parent / "runners.yaml"
        if not runners_path.is_file():
            raise RecipeError(f"no runners file {runners_path}", hint="pass --runner-config")
        old = path.read_text()
        result = mirror_text(old, str(path), keys, backend, load_runners(runners_path), size)
        outcomes += result.outcomes
        arms += result.arms
        for line in result.warnings:
            print(f"warning: {line}")
        if result.added:
            _validated(path, result.text, runners_path)
            edits[path] = (old, result.text)
            edits.update(_launcher_edits(result.arms, path))
    _print_outcomes(outcomes, backend)
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
            "description": _description(outcomes, arms, backend),
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
