"""`kvbench changelog check|jobs`: the perf changelog that triggers sweeps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.errors import ChangelogError

changelog_app = typer.Typer(
    help="The perf changelog: validate a change, list the jobs its new entries ask for.",
    no_args_is_help=True,
)
app.add_typer(changelog_app, name="changelog")

_Base = Annotated[str | None, typer.Option("--base", help="Base git ref (e.g. origin/main).")]
_Head = Annotated[str | None, typer.Option("--head", help="Head git ref (default HEAD).")]
_BaseFile = Annotated[Path | None, typer.Option("--base-file", help="Base version of the file.")]
_HeadFile = Annotated[Path | None, typer.Option("--head-file", help="Head version of the file.")]
_Path = Annotated[str | None, typer.Option(
    "--path", help="The changelog's path inside the repo (default: perf-changelog.yaml, or "
                   "inferencex-e2e/perf-changelog.yaml in the newer layout).")]
_Repo = Annotated[Path, typer.Option("--repo", help="The git repository (for --base/--head).")]
_Configs = Annotated[list[Path] | None, typer.Option(
    "--config-files", help="Master configs whose keys entries may name (default: "
    "configs/*master*.yaml or *-master.yaml beside the changelog).")]
_Pr = Annotated[int | None, typer.Option("--pr", help="This PR's number: new entries must "
                                                      "link to it (or the placeholder).")]


def _changelog_path(path: str | None, repo: Path) -> str:
    """--path, else where the checkout at --repo keeps its changelog (either layout)."""
    if path is not None:
        return path
    from kvbench.recipe.layout import CHANGELOG_FILE, E2E_DIR

    newer = f"{E2E_DIR}/{CHANGELOG_FILE}"
    return newer if (repo / newer).is_file() else CHANGELOG_FILE


def _report(base: str | None, head: str | None, base_file: Path | None, head_file: Path | None,
            path: str | None, repo: Path, config_files: list[Path] | None, pr: int | None):
    from kvbench.changelog import check_files, check_refs

    path = _changelog_path(path, repo)

    if head_file is not None or base_file is not None:
        if base is not None or head is not None:
            raise ChangelogError("give either --base/--head (git refs) or --base-file/"
                                 "--head-file (files), not both")
        if head_file is None:
            raise ChangelogError("--base-file needs --head-file")
        for f in (base_file, head_file):
            if f is not None and not f.is_file():
                raise ChangelogError(f"no such file: {f}")
        return check_files(base_file, head_file, config_files, pr_number=pr)
    if base is None:
        raise ChangelogError("give --base REF (and optionally --head REF), or --base-file OLD "
                             "--head-file NEW")
    return check_refs(base, head or "HEAD", path, repo=repo, config_files=config_files,
                      pr_number=pr)


@changelog_app.command("check")
def changelog_check(
    base: _Base = None, head: _Head = None, base_file: _BaseFile = None,
    head_file: _HeadFile = None, path: _Path = None, repo: _Repo = Path("."),
    config_files: _Configs = None, pr: _Pr = None,
    format: Annotated[str, typer.Option("--format", help="text or json")] = "text",
) -> None:
    """Validate a change of perf-changelog.yaml: append-only, history immutable, keys exist."""
    report = _report(base, head, base_file, head_file, path, repo, config_files, pr)
    if format == "json":
        from kvbench.files import print_json

        print_json(report.to_json())
        return
    from rich.console import Console

    out = Console()
    out.print(f"[green]ok[/]: {len(report.new_entries)} new entr"
              f"{'y' if len(report.new_entries) == 1 else 'ies'} after {report.base_count}"
              + (f", pr-link corrected in entries {report.corrections}"
                 if report.corrections else ""))
    for entry, line in zip(report.new_entries, report.new_start_lines, strict=True):
        out.print(f"  line {line}: {', '.join(entry.config_keys)}  ({entry.pr_link})",
                  highlight=False)


@changelog_app.command("jobs")
def changelog_jobs(
    base: _Base = None, head: _Head = None, base_file: _BaseFile = None,
    head_file: _HeadFile = None, path: _Path = None, repo: _Repo = Path("."),
    config_files: _Configs = None, pr: _Pr = None,
    runner_config: Annotated[Path | None, typer.Option(help="runners.yaml")] = None,
    trim_conc: Annotated[bool, typer.Option(help="Keep only the lowest concurrency of each "
                                                 "topology (PR runs).")] = False,
) -> None:
    """Print (JSON) the matrix rows of the config keys the change's new entries name."""

    from kvbench.changelog.jobs import rows_for_change
    from kvbench.changelog.keys import default_config_files
    from kvbench.files import print_json

    report = _report(base, head, base_file, head_file, path, repo, config_files, pr)
    where = head_file if head_file is not None else repo / _changelog_path(path, repo)
    configs = config_files or default_config_files(where)
    if runner_config is None:
        beside = [c.parent / "runners.yaml" for c in configs]
        runner_config = next((r for r in beside if r.is_file()), None)
    rows = rows_for_change(report, configs, runner_config, trim_conc=trim_conc)
    print_json(rows)
