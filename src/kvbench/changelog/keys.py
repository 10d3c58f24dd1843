"""Config keys: which exist in the master configs, and what a changelog glob expands to."""

from __future__ import annotations

import difflib
import re
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


def matching_keys(pattern: str, available: Sequence[str]) -> list[str]:
    """The config keys `pattern` names, as CI resolves it (InferenceX 843c6254f
    utils/process_changelog.py:138-156): `*` is the one wildcard and the pattern must match a
    whole key; any other character, `?` and `[` included, is literal. Master-config order."""
    if "*" not in pattern:
        return [pattern] if pattern in available else []
    rx = re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
    return [k for k in available if rx.fullmatch(k)]


def key_problem(pattern: str, known: Collection[str]) -> str | None:
    """Why `pattern` names no config key, or None when it names one."""
    if matching_keys(pattern, list(known)):
        return None
    close = difflib.get_close_matches(pattern, sorted(known), n=3, cutoff=0.6)
    also = f"; close: {', '.join(close)}" if close else ""
    kind = "pattern" if "*" in pattern else "config key"
    return (f"{kind} {pattern!r} matches no config key in the master configs ('*' is the only "
            f"wildcard){also}")


def expand_keys(patterns: Iterable[str], available: Sequence[str]) -> list[str]:
    """Config keys named by `patterns`, in the order named (a pattern's matches in
    master-config order), each once; ChangelogError on the first that names none."""
    out: dict[str, None] = {}
    for pattern in patterns:
        matches = matching_keys(pattern, available)
        if not matches:
            raise ChangelogError(key_problem(pattern, available) or pattern)
        out.update(dict.fromkeys(matches))
    return list(out)
