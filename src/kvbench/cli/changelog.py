"""`kvbench changelog check|jobs`: InferenceX CI's changelog gate and the jobs it sweeps."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.errors import ChangelogError

changelog_app = typer.Typer(
    help="The perf changelog: CI's verdict on a change, and the job document it sweeps.",
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
    "--config-files", help="Master configs at head (default: configs/*master*.yaml of the "
    "checkout, or *-master.yaml beside the changelog).")]
_Runners = Annotated[Path | None, typer.Option(
    "--runner-config", help="runners.yaml at head (default: beside the master configs).")]
_BaseConfigs = Annotated[list[Path] | None, typer.Option(
    "--base-config-files", help="Master configs at base, read by append-only entries (with "
    "--base/--head they are read from git).")]
_BaseRunners = Annotated[Path | None, typer.Option(
    "--base-runner-config", help="runners.yaml at base (append-only entries, file mode).")]
_Pr = Annotated[int | None, typer.Option("--pr", help="This PR's number: a new entry's "
                                                      "pr-link naming another is a warning.")]
_AllEvals = Annotated[bool, typer.Option("--all-evals", help="As the all-evals PR label: every "
                                         "entry's eval selection expanded.")]
_EvalsOnly = Annotated[bool, typer.Option("--evals-only", help="As the evals-only PR label: no "
                                          "throughput rows, only evals.")]


def _changelog_path(path: str | None, repo: Path) -> str:
    """--path, else where the checkout at --repo keeps its changelog (either layout)."""
    if path is not None:
        return path
    from kvbench.recipe.layout import CHANGELOG_FILE, E2E_DIR

    newer = f"{E2E_DIR}/{CHANGELOG_FILE}"
    return newer if (repo / newer).is_file() else CHANGELOG_FILE


def _run_gate(stack: ExitStack, *, base: str | None, head: str | None, base_file: Path | None,
              head_file: Path | None, path: str | None, repo: Path,
              config_files: list[Path] | None, runner_config: Path | None,
              base_config_files: list[Path] | None, base_runner_config: Path | None,
              pr: int | None, flags, style: bool, strict: bool):
    from kvbench.changelog.check import gate, read_at_ref, revision_at_ref
    from kvbench.changelog.diff import added_between_files, added_between_refs
    from kvbench.changelog.jobs import Revision
    from kvbench.changelog.keys import default_config_files, known_config_keys
    from kvbench.changelog.style import style_report
    from kvbench.recipe.layout import find_checkout

    files_mode = head_file is not None or base_file is not None
    if files_mode:
        if base is not None or head is not None:
            raise ChangelogError("give either --base/--head (git refs) or --base-file/"
                                 "--head-file (files), not both")
        if head_file is None:
            raise ChangelogError("--base-file needs --head-file")
        for f in (base_file, head_file):
            if f is not None and not f.is_file():
                raise ChangelogError(f"no such file: {f}")
        where = head_file
    elif base is None:
        raise ChangelogError("give --base REF (and optionally --head REF), or --base-file OLD "
                             "--head-file NEW")
    else:
        path = _changelog_path(path, repo)
        where = repo / path
    configs = tuple(config_files or default_config_files(where))
    runners = runner_config or next((c.parent / "runners.yaml" for c in configs
                                     if (c.parent / "runners.yaml").is_file()), None)
    if runners is None:
        raise ChangelogError(f"no runners.yaml beside {configs[0]}",
                             hint="pass --runner-config PATH")
    checkout = find_checkout(configs[0].absolute().parent)
    layout = checkout.layout if checkout is not None else "classic"
    head_rev = Revision(configs, runners)
    if files_mode:
        base_raw = base_file.read_bytes() if base_file is not None else b""
        head_raw = head_file.read_bytes()
        added = added_between_files(base_file, head_file)
        refs = (str(base_file) if base_file is not None else "/dev/null", str(head_file))

        def base_rev() -> Revision:
            if not base_config_files:
                raise ChangelogError("append-only entries compare with the base revision's "
                                     "master configs", hint="pass --base-config-files (and "
                                     "--base-runner-config), or use --base/--head git refs")
            return Revision(tuple(base_config_files), base_runner_config or runners)
    else:
        head = head or "HEAD"
        base_raw, head_raw = read_at_ref(base, path, repo), read_at_ref(head, path, repo)
        added = added_between_refs(base, head, path, repo)
        refs = (base, head)

        def base_rev() -> Revision:
            if base_config_files:
                return Revision(tuple(base_config_files), base_runner_config or runners)
            return stack.enter_context(revision_at_ref(base, repo, configs, runners))

    def layout_rules():
        return style_report(base_raw, head_raw, known_config_keys(configs), pr_number=pr)

    return gate(head_raw, added, head_rev, base_rev, base_ref=refs[0], head_ref=refs[1],
                flags=flags, layout=layout, style=layout_rules if style else None,
                strict=strict)


_SOURCES = ("base", "head", "base_file", "head_file", "path", "repo", "config_files",
            "runner_config", "base_config_files", "base_runner_config")


def _gate_of(params: dict, **options):
    """`_run_gate` on the where-to-read options both commands share (`params`: their
    parameters by name)."""
    with ExitStack() as stack:
        return _run_gate(stack, **{k: params[k] for k in _SOURCES}, **options)


@changelog_app.command("check")
def changelog_check(
    base: _Base = None, head: _Head = None, base_file: _BaseFile = None,
    head_file: _HeadFile = None, path: _Path = None, repo: _Repo = Path("."),
    config_files: _Configs = None, runner_config: _Runners = None,
    base_config_files: _BaseConfigs = None, base_runner_config: _BaseRunners = None,
    pr: _Pr = None, all_evals: _AllEvals = False, evals_only: _EvalsOnly = False,
    strict: Annotated[bool, typer.Option("--strict", help="Refuse the change on any of "
                                         "kvbench's layout warnings too.")] = False,
    format: Annotated[str, typer.Option("--format", help="text or json")] = "text",
) -> None:
    """Accept or refuse a change of perf-changelog.yaml exactly as InferenceX's CI gate does
    (final newline; the added lines are valid entries naming existing keys; no deleted line;
    append-only scope), then list kvbench's stricter layout rules it breaks as warnings."""
    from kvbench.changelog.jobs import JobFlags

    if format not in ("text", "json"):
        raise ChangelogError(f"--format {format!r} is not allowed (allowed: text, json)")
    report = _gate_of(locals(), pr=pr, style=True, strict=strict,
                      flags=JobFlags(all_evals=all_evals, evals_only=evals_only))
    summary = report.to_json()
    if format == "json":
        from kvbench.files import print_json

        print_json(summary)
        return
    entries = summary["new-entries"]
    rows = ", ".join(f"{name} {n}" for name, n in summary["rows"].items() if n) or "no rows"
    print(f"ok: CI's gate accepts the change: {len(entries)} new entr"
          f"{'y' if len(entries) == 1 else 'ies'} ({rows})")
    for entry in entries:
        print(f"  {', '.join(entry['config-keys'])}  ({entry['pr-link']})")
    for warning in report.warnings:
        print(f"warning[{warning.name}]: {warning.message}")


@changelog_app.command("jobs")
def changelog_jobs(
    base: _Base = None, head: _Head = None, base_file: _BaseFile = None,
    head_file: _HeadFile = None, path: _Path = None, repo: _Repo = Path("."),
    config_files: _Configs = None, runner_config: _Runners = None,
    base_config_files: _BaseConfigs = None, base_runner_config: _BaseRunners = None,
    trim_conc: Annotated[bool, typer.Option("--trim-conc", help="As a sweep-enabled PR: each "
                                            "single-node curve at its lowest concurrency, each "
                                            "multi-node row's list cut to its lowest.")] = False,
    all_evals: _AllEvals = False, evals_only: _EvalsOnly = False,
    format: Annotated[str, typer.Option("--format", help="json (the document CI's workflow "
                                        "reads, byte for byte) or rows (the benchmark and "
                                        "eval rows as one list)")] = "json",
) -> None:
    """The job document InferenceX's sweep workflow builds from a change (process_changelog.py's
    JSON: single_node / multi_node buckets by seq-len or agentic, recipe fingerprints, the eval
    buckets, changelog_metadata)."""
    from kvbench.changelog.jobs import JobFlags

    if format not in ("json", "rows"):
        raise ChangelogError(f"--format {format!r} is not allowed (allowed: json, rows)")
    report = _gate_of(locals(), pr=None, style=False, strict=False,
                      flags=JobFlags(trim_conc=trim_conc, all_evals=all_evals,
                                     evals_only=evals_only))
    text = report.search_space.to_json()
    if format == "rows":
        import json

        doc = json.loads(text)
        rows = [r for name in ("single_node", "multi_node") for bucket in doc[name].values()
                for r in bucket]
        rows += [r for name in ("evals", "agentic_evals", "multinode_evals",
                                "multinode_agentic_evals") for r in doc[name]]
        text = json.dumps(rows, indent=2, ensure_ascii=False)
    sys.stdout.write(text + "\n")
