"""Append one entry to a changelog in the layout `check_change` accepts: the base bytes
unchanged, exactly one blank line before the entry, no blank line inside it."""

from __future__ import annotations

import json
import re

from kvbench.changelog.entry import ChangelogEntry


def _quoted(text: str) -> str:
    # JSON string syntax is valid double-quoted YAML, the quoting the real file uses
    return json.dumps(text, ensure_ascii=False)


# a link YAML reads back as written, unquoted (as the real file spells them); anything else
# (a space before `#`, a `: `) is quoted, so no part of it becomes a comment or a key
_PLAIN_LINK = re.compile(r"[A-Za-z0-9][A-Za-z0-9:/._~%?=&+@-]*")


def entry_text(entry: ChangelogEntry) -> str:
    lines = ["- config-keys:", *(f"    - {k}" for k in entry.config_keys)]
    if entry.scenario_type:
        lines += ["  scenario-type:", *(f"    - {s}" for s in entry.scenario_type)]
    lines += ["  description:", *(f"    - {_quoted(d)}" for d in entry.description)]
    link = entry.pr_link
    lines.append(f"  pr-link: {link if _PLAIN_LINK.fullmatch(link) else _quoted(link)}")
    return "\n".join(lines) + "\n"


def appended(base: str, entry: ChangelogEntry) -> str:
    """`base` with `entry` after it. Trailing blank lines of the base are kept (they are
    history); one blank separator is added only when the base does not end with one."""
    if not base:
        return entry_text(entry)
    head = base if base.endswith("\n") else base + "\n"
    separator = "" if head.endswith("\n\n") else "\n"
    return head + separator + entry_text(entry)
