"""Config keys: which exist in the master configs, and what a changelog glob expands to."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from kvbench.errors import ChangelogError

MASTER_GLOBS = ("configs/*master*.yaml", "*-master.yaml")


def default_config_files(changelog: Path | None) -> list[Path]:
    """Master configs beside the changelog, under its checkout's configs/ (either layout), or
    under ./configs."""
    from kvbench.recipe.layout import find_checkout

    roots = [Path.cwd()]
    if changelog is not None:
        roots.insert(0, changelog.resolve().parent)
    for root in roots:
        checkout = find_checkout(root)
        if checkout is not None and checkout.master_configs():
            return checkout.master_configs()
        for pattern in MASTER_GLOBS:
            found = sorted(root.glob(pattern))
            if found:
                return found
    raise ChangelogError(
        "no master config files found to check config keys against",
        hint="pass --config-files configs/nvidia-master.yaml --config-files ...",
    )


def known_config_keys(paths: Sequence[Path]) -> set[str]:
    """Every config key the master configs define, validated by the recipe loader (so a change
    that breaks a master config fails here too, with every error listed)."""
    from kvbench.recipe import load_master_configs

    return set(load_master_configs([Path(p) for p in paths]))


def key_problem(pattern: str, known: Collection[str]) -> str | None:
    """Why `pattern` names no config key, or None when it is a key or a glob matching one."""
    if pattern in known or fnmatch.filter(known, pattern):
        return None
    close = difflib.get_close_matches(pattern, sorted(known), n=3, cutoff=0.6)
    also = f"; close: {', '.join(close)}" if close else ""
    kind = "glob" if any(c in pattern for c in "*?[") else "config key"
    return f"{kind} {pattern!r} matches no config key in the master configs{also}"


def expand_keys(patterns: Iterable[str], known: Collection[str]) -> list[str]:
    """Config keys named by `patterns` (exact keys or fnmatch globs), sorted, de-duplicated."""
    out: set[str] = set()
    problems = []
    for pattern in patterns:
        if problem := key_problem(pattern, known):
            problems.append(problem)
        out.update(fnmatch.filter(known, pattern))
    if problems:
        err = ChangelogError(problems[0])
        err.errors = problems
        raise err
    return sorted(out)
