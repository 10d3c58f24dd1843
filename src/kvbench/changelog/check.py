"""The change rules: append-only, history immutable, new entries well-formed.

A change is a (base, head) pair of the whole file. Only a pr-link placeholder of a historical
entry may be corrected, and such a correction is its own change (never mixed with additions)."""

from __future__ import annotations

import subprocess
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.changelog.entry import (
    PR_LINK_PLACEHOLDER_ID,
    ChangelogEntry,
    pr_link_is_canonical,
    pr_link_problem,
)
from kvbench.changelog.keys import default_config_files, key_problem, known_config_keys
from kvbench.changelog.parse import ENTRY_START, ParsedChangelog, changelog_error, parse_changelog
from kvbench.errors import ChangelogError


@dataclass(slots=True)
class ChangeReport:
    """What a valid change does: entries it appends and historical pr-links it corrects."""

    base_count: int
    new_entries: list[ChangelogEntry] = field(default_factory=list)
    new_start_lines: list[int] = field(default_factory=list)
    corrections: list[int] = field(default_factory=list)  # indexes of corrected entries

    def to_json(self) -> dict:
        return {
            "base-entries": self.base_count,
            "new-entries": [e.model_dump(by_alias=True, exclude_defaults=True)
                            for e in self.new_entries],
            "new-entry-lines": self.new_start_lines,
            "pr-link-corrections": self.corrections,
        }


def _history_problems(base: ParsedChangelog, head: ParsedChangelog) -> tuple[list[str], list[int]]:
    problems: list[str] = []
    corrections: list[int] = []
    if len(head.raw_entries) < len(base.raw_entries):
        problems.append(f"head has {len(head.raw_entries)} entries, base has "
                        f"{len(base.raw_entries)}: entries were deleted (the file is append-only)")
    for i, (old, new) in enumerate(zip(base.raw_entries, head.raw_entries, strict=False)):
        if old == new:
            continue
        line = head.start_lines[i]
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed == ["pr-link"]:
            if pr_link_is_canonical(old["pr-link"]):
                problems.append(f"head:{line}: entry {i} pr-link changed from the canonical "
                                f"{old['pr-link']!r} to {new['pr-link']!r}; only a placeholder "
                                f"or malformed link may be corrected")
            elif not pr_link_is_canonical(str(new["pr-link"])):
                problems.append(f"head:{line}: entry {i} pr-link corrected to "
                                f"{new['pr-link']!r}, which is not canonical either")
            else:
                corrections.append(i)
            continue
        problems.append(f"head:{line}: historical entry {i} was modified ({', '.join(changed)}); "
                        f"entries are immutable once merged, append a new entry instead")
    return problems, corrections


def _raw_problems(base: ParsedChangelog, head: ParsedChangelog,
                  corrections: list[int]) -> list[str]:
    """Byte-level append-only check, and the blank-line layout of the appended text."""
    base_lines, head_lines = base.lines[:-1], head.lines[:-1]  # both end with '\n'
    corrected_lines = set()
    for i in corrections:
        stop = head.start_lines[i + 1] - 1 if i + 1 < len(head.start_lines) else len(head_lines)
        for n in range(head.start_lines[i] - 1, stop):
            if head_lines[n].lstrip().startswith("pr-link:"):
                corrected_lines.add(n)
    for n, old in enumerate(base_lines):
        if n >= len(head_lines) or (head_lines[n] != old and n not in corrected_lines):
            return [f"head:{n + 1}: the head does not start with the base file byte for byte "
                    f"(first difference on this line: {old!r}); only append to the file"]
    added = head_lines[len(base_lines):]
    if not added:
        return []
    problems = []
    first = len(base_lines) + 1
    trailing_blank = bool(base_lines) and base_lines[-1] == ""
    blank_run = 1 if trailing_blank else 0
    for k, line in enumerate(added):
        lineno = first + k
        if line == "":
            blank_run += 1
            continue
        if not line.strip():
            problems.append(f"head:{lineno}: whitespace-only line; a separator line must be empty")
            blank_run += 1
            continue
        is_start = bool(ENTRY_START.match(line))
        if is_start and base_lines and blank_run != 1:
            problems.append(f"head:{lineno}: {blank_run} blank lines before this entry; "
                            f"separate entries with exactly one blank line")
        elif not is_start and blank_run:
            problems.append(f"head:{lineno}: blank line inside an entry; blank lines only "
                            f"separate entries")
        elif not is_start and k == 0 and not base_lines:
            problems.append(f"head:{lineno}: the file must start with '- config-keys:'")
        blank_run = 0
    return problems


def check_change(base_raw: bytes, head_raw: bytes, known_keys: Collection[str], *,
                 pr_number: int | None = None) -> ChangeReport:
    """Validate a change of the changelog; raise ChangelogError listing every violation."""
    problems: list[str] = []
    try:
        base = parse_changelog(base_raw, "base")
    except ChangelogError as e:
        raise changelog_error("the base changelog is itself invalid", e.errors[1:]) from None
    head = parse_changelog(head_raw, "head")
    history, corrections = _history_problems(base, head)
    problems += history
    n = len(base.raw_entries)
    report = ChangeReport(base_count=n, corrections=corrections,
                          new_entries=head.entries[n:], new_start_lines=head.start_lines[n:])
    if not history:
        problems += _raw_problems(base, head, corrections)
    if corrections and report.new_entries:
        problems.append(f"a pr-link correction (entries {corrections}) cannot be combined with "
                        f"new entries; make two separate changes")
    for entry, line in zip(report.new_entries, report.new_start_lines, strict=True):
        if problem := pr_link_problem(entry.pr_link):
            problems.append(f"head:{line}: {problem}")
        elif pr_number is not None and entry.pr_link.rsplit("/", 1)[-1] not in (
                str(pr_number), PR_LINK_PLACEHOLDER_ID):
            problems.append(f"head:{line}: pr-link {entry.pr_link!r} must name this PR "
                            f"({pr_number}) or the placeholder {PR_LINK_PLACEHOLDER_ID}")
        for pattern in entry.config_keys:
            if problem := key_problem(pattern, known_keys):
                problems.append(f"head:{line}: {problem}")
        if problem := entry.eval_mode_problem():
            problems.append(f"head:{line}: {problem}")
    if problems:
        raise changelog_error("the changelog change is invalid", problems)
    return report


def check_files(base_file: Path | None, head_file: Path,
                config_files: Sequence[Path] | None = None, *,
                pr_number: int | None = None) -> ChangeReport:
    """`check_change` on two files; a missing base means the file is new."""
    base_raw = base_file.read_bytes() if base_file is not None else b""
    keys = known_config_keys(config_files or default_config_files(head_file))
    return check_change(base_raw, head_file.read_bytes(), keys, pr_number=pr_number)


def read_at_ref(ref: str, path: str, repo: Path) -> bytes:
    """The file's bytes at a git ref (empty when the file does not exist there)."""
    exists = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{ref}:{path}"],
                            capture_output=True)
    if exists.returncode != 0:
        verify = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                                 f"{ref}^{{commit}}"], capture_output=True)
        if verify.returncode != 0:
            raise ChangelogError(f"git ref {ref!r} not found in {repo}",
                                 hint="fetch it first, e.g. git fetch origin main")
        return b""
    out = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True)
    if out.returncode != 0:
        raise ChangelogError(f"git show {ref}:{path} failed: {out.stderr.decode().strip()}")
    return out.stdout


def check_refs(base_ref: str, head_ref: str, path: str = "perf-changelog.yaml", *,
               repo: Path = Path("."), config_files: Sequence[Path] | None = None,
               pr_number: int | None = None) -> ChangeReport:
    """`check_change` on the file as it is at two git refs of `repo`."""
    keys = known_config_keys(config_files or default_config_files(repo / path))
    return check_change(read_at_ref(base_ref, path, repo), read_at_ref(head_ref, path, repo),
                        keys, pr_number=pr_number)
