"""The perf changelog: the append-only YAML whose new entries trigger sweeps.

`check_change(base, head, known_keys)` enforces every rule at once and reports all
violations; `new_entry_rows(...)` turns the entries a change adds into matrix rows."""

from __future__ import annotations

from kvbench.changelog.check import ChangeReport, check_change, check_files, check_refs
from kvbench.changelog.entry import PR_LINK_PATTERN, PR_LINK_PLACEHOLDER, ChangelogEntry
from kvbench.changelog.keys import expand_keys, known_config_keys
from kvbench.changelog.parse import ParsedChangelog, parse_changelog

__all__ = [
    "PR_LINK_PATTERN",
    "PR_LINK_PLACEHOLDER",
    "ChangeReport",
    "ChangelogEntry",
    "ParsedChangelog",
    "check_change",
    "check_files",
    "check_refs",
    "expand_keys",
    "known_config_keys",
    "parse_changelog",
]
