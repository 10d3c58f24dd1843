"""Append one entry to a changelog in the layout `check_change` accepts: the base bytes
unchanged, exactly one blank line before the entry, no blank line inside it."""

from __future__ import annotations

import json

from kvbench.changelog.entry import ChangelogEntry


def _quoted(text: str) -> str:
    # JSON string syntax is valid double-quoted YAML, the quoting the real file uses
    return json.dumps(text, ensure_ascii=False)


def entry_text(entry: ChangelogEntry) -> str:
    lines = ["- config-keys:", *(f"    - {k}" for k in entry.config_keys)]
    if entry.scenario_type:
        lines += ["  scenario-type:", *(f"    - {s}" for s in entry.scenario_type)]
    lines += ["  description:", *(f"    - {_quoted(d)}" for d in entry.description)]
    lines.append(f"  pr-link: {entry.pr_link}")
    return "\n".join(lines) + "\n"


def appended(base: str, entry: ChangelogEntry) -> str:
    """`base` with `entry` after it. Trailing blank lines of the base are kept (they are
    history); one blank separator is added only when the base does not end with one."""
    if not base:
        return entry_text(entry)
    head = base if base.endswith("\n") else base + "\n"
    separator = "" if head.endswith("\n\n") else "\n"
    return head + separator + entry_text(entry)
