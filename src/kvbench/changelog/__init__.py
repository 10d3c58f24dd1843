"""The perf changelog: the append-only YAML whose new entries trigger sweeps.

`gate(...)` is InferenceX CI's verdict on a change and the job document its sweep workflow
reads (`jobs.search_space`); `style_report(...)` lists kvbench's stricter layout rules a change
breaks, and `check_change(...)` refuses any of them (for writers of the file)."""

from __future__ import annotations

from kvbench.changelog.check import GateReport, check_change, check_files, gate
from kvbench.changelog.entry import PR_LINK_PATTERN, PR_LINK_PLACEHOLDER, ChangelogEntry
from kvbench.changelog.jobs import JobFlags, Revision, search_space
from kvbench.changelog.keys import expand_keys, known_config_keys
from kvbench.changelog.parse import ParsedChangelog, parse_changelog
from kvbench.changelog.style import ChangeReport, StyleWarning, style_report

__all__ = [
    "PR_LINK_PATTERN",
    "PR_LINK_PLACEHOLDER",
    "ChangeReport",
    "ChangelogEntry",
    "GateReport",
    "JobFlags",
    "ParsedChangelog",
    "Revision",
    "StyleWarning",
    "check_change",
    "check_files",
    "expand_keys",
    "gate",
    "known_config_keys",
    "parse_changelog",
    "search_space",
    "style_report",
]
