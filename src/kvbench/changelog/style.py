"""kvbench's stricter layout rules for a changelog change, each a named warning.

InferenceX's gate accepts any change whose added lines are valid entries (check.py); it does
not look at blank lines, at where the entries go, or at history beyond "no deleted line". These
rules keep the file as the maintainers write it: append at the end, one empty line between
entries, history immutable, canonical pr-links. `changelog check` prints them as warnings
(`--strict` refuses them); `recipe mirror` writes only changes that pass them all. Most mirror
InferenceX's own unused helpers (utils/validate_perf_changelog.py:87-297 at 843c6254f, not
called by its `main`).

Names: file-bytes, file-invalid, trailing-blank-lines, entries-deleted, history-modified,
pr-link-correction, not-appended-at-end, whitespace-separator, separator-blank-lines,
blank-line-in-entry, file-start, inserted-mid-file, pr-link, config-key."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from kvbench.changelog.entry import (
    PR_LINK_PLACEHOLDER_ID,
    ChangelogEntry,
    pr_link_is_canonical,
    pr_link_problem,
)
from kvbench.changelog.keys import key_problem
from kvbench.changelog.parse import ENTRY_START, ParsedChangelog, byte_problems, parse_changelog
from kvbench.errors import ChangelogError


@dataclass(frozen=True, slots=True)
class StyleWarning:
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


@dataclass(slots=True)
class ChangeReport:
    """What a change does by the layout rules: entries it appends (after the base's), the
    historical pr-links it corrects, and every rule it breaks."""

    base_count: int
    new_entries: list[ChangelogEntry] = field(default_factory=list)
    new_start_lines: list[int] = field(default_factory=list)
    corrections: list[int] = field(default_factory=list)  # indexes of corrected entries
    warnings: list[StyleWarning] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "base-entries": self.base_count,
            "new-entries": [e.model_dump(by_alias=True, exclude_defaults=True)
                            for e in self.new_entries],
            "new-entry-lines": self.new_start_lines,
            "pr-link-corrections": self.corrections,
            "warnings": [{"name": w.name, "message": w.message} for w in self.warnings],
        }


def _history(base: ParsedChangelog, head: ParsedChangelog, out: list[StyleWarning]
             ) -> list[int]:
    corrections: list[int] = []
    if len(head.raw_entries) < len(base.raw_entries):
        out.append(StyleWarning("entries-deleted", f"head has {len(head.raw_entries)} entries, "
                                f"base has {len(base.raw_entries)}: the file is append-only"))
    for i, (old, new) in enumerate(zip(base.raw_entries, head.raw_entries, strict=False)):
        if old == new:
            continue
        line = head.start_lines[i]
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed != ["pr-link"]:
            out.append(StyleWarning("history-modified", f"head:{line}: historical entry {i} "
                                    f"was modified ({', '.join(changed)}); entries are "
                                    f"immutable once merged, append a new entry instead"))
        elif pr_link_is_canonical(old["pr-link"]):
            out.append(StyleWarning("pr-link-correction", f"head:{line}: entry {i} pr-link "
                                    f"changed from the canonical {old['pr-link']!r} to "
                                    f"{new['pr-link']!r}; only a placeholder or malformed link "
                                    f"may be corrected"))
        elif not pr_link_is_canonical(str(new["pr-link"])):
            out.append(StyleWarning("pr-link-correction", f"head:{line}: entry {i} pr-link "
                                    f"corrected to {new['pr-link']!r}, not canonical either"))
        else:
            corrections.append(i)
    return corrections


def _inserted(base: ParsedChangelog, head: ParsedChangelog) -> list[int] | None:
    """The head entries that are not the base's, when the base's entries all come back
    unchanged and in order (a merge may put new ones between them); else None."""
    j, extra = 0, []
    for i, entry in enumerate(head.raw_entries):
        if j < len(base.raw_entries) and entry == base.raw_entries[j]:
            j += 1
        else:
            extra.append(i)
    return extra if j == len(base.raw_entries) else None


def _layout(base: ParsedChangelog, head: ParsedChangelog, corrections: list[int],
            out: list[StyleWarning]) -> None:
    """The head is the base plus appended text, laid out with one empty line per separator."""
    # the lines of each file; a last line without its '\n' is still a line
    def lines(parsed: ParsedChangelog) -> list[str]:
        return parsed.lines[:-1] if parsed.text.endswith("\n") or not parsed.text \
            else parsed.lines

    base_lines, head_lines = lines(base), lines(head)
    corrected = set()
    for i in corrections:
        stop = head.start_lines[i + 1] - 1 if i + 1 < len(head.start_lines) else len(head_lines)
        corrected.update(n for n in range(head.start_lines[i] - 1, stop)
                         if head_lines[n].lstrip().startswith("pr-link:"))
    for n, old in enumerate(base_lines):
        if n >= len(head_lines) or (head_lines[n] != old and n not in corrected):
            out.append(StyleWarning("not-appended-at-end", f"head:{n + 1}: the head does not "
                                    f"start with the base file byte for byte (first difference "
                                    f"on this line: {old[:80]!r}); append at the end"))
            return
    blank_run = 1 if base_lines and base_lines[-1] == "" else 0
    first = len(base_lines) + 1
    for k, line in enumerate(head_lines[len(base_lines):]):
        lineno = first + k
        if line == "":
            blank_run += 1
            continue
        if not line.strip():
            out.append(StyleWarning("whitespace-separator", f"head:{lineno}: whitespace-only "
                                    f"line; a separator line must be empty"))
            blank_run += 1
            continue
        is_start = bool(ENTRY_START.match(line))
        if is_start and base_lines and blank_run != 1:
            out.append(StyleWarning("separator-blank-lines", f"head:{lineno}: {blank_run} blank "
                                    f"lines before this entry; separate entries with exactly "
                                    f"one empty line"))
        elif not is_start and blank_run:
            out.append(StyleWarning("blank-line-in-entry", f"head:{lineno}: blank line inside "
                                    f"an entry; blank lines only separate entries"))
        elif not is_start and k == 0 and not base_lines:
            out.append(StyleWarning("file-start", f"head:{lineno}: the file must start with "
                                    f"'- config-keys:'"))
        blank_run = 0


def _parsed(raw: bytes, source: str, out: list[StyleWarning]) -> ParsedChangelog | None:
    for problem in byte_problems(raw, source):
        out.append(StyleWarning("trailing-blank-lines" if "blank line" in problem
                                else "file-bytes", problem))
    try:
        return parse_changelog(raw, source, byte_rules=False)
    except ChangelogError as e:
        out.extend(StyleWarning("file-invalid", p) for p in e.errors[1:])
        return None


def _appended(base_raw: bytes, head_raw: bytes, warnings: list[StyleWarning]
              ) -> ChangeReport | None:
    """The report of a head that is the base plus whole appended entries, read from the
    appended text alone (a full parse of a 400 KB file is 0.1 s); None when the head is
    anything else."""
    if not base_raw.endswith(b"\n") or not head_raw.startswith(base_raw):
        return None
    try:
        base_text, tail = base_raw.decode(), head_raw[len(base_raw):].decode()
    except UnicodeDecodeError:
        return None
    first = next((ln for ln in tail.split("\n") if ln.strip()), None)
    if first is not None and not ENTRY_START.match(first):
        return None  # lines continuing the last entry: the full reading names that
    n = sum(1 for ln in base_text.split("\n") if ENTRY_START.match(ln))
    offset = base_text.count("\n")
    for problem in byte_problems(head_raw, "head"):
        warnings.append(StyleWarning("trailing-blank-lines" if "blank line" in problem
                                     else "file-bytes", problem))
    try:
        new = parse_changelog(tail.encode(), "head", byte_rules=False, first_line=offset + 1,
                              first_entry=n)
    except ChangelogError as e:
        warnings.extend(StyleWarning("file-invalid", p) for p in e.errors[1:])
        return ChangeReport(base_count=n, warnings=warnings)
    report = ChangeReport(base_count=n, warnings=warnings, new_entries=new.entries,
                          new_start_lines=new.start_lines)
    _layout(ParsedChangelog(text=base_text), ParsedChangelog(text=base_text + tail), [],
            warnings)
    return report


def style_report(base_raw: bytes, head_raw: bytes, known_keys: Collection[str], *,
                 pr_number: int | None = None) -> ChangeReport:
    """Every layout rule the change breaks (historical problems of the base not counted)."""
    warnings: list[StyleWarning] = []
    report = _appended(base_raw, head_raw, warnings)
    if report is None:
        report = _reread(base_raw, head_raw, warnings)
    if report is not None:
        _new_entry_rules(report, known_keys, pr_number)
    return report or ChangeReport(base_count=0, warnings=warnings)


def _reread(base_raw: bytes, head_raw: bytes, warnings: list[StyleWarning]
            ) -> ChangeReport | None:
    """The report from both files read whole (history compared entry by entry)."""
    base = _parsed(base_raw, "base", [])
    head = _parsed(head_raw, "head", warnings)
    if base is None or head is None:
        return None
    n, total = len(base.raw_entries), len(head.raw_entries)
    extra = _inserted(base, head)
    if extra is not None and extra != list(range(n, total)):
        # CI reads such a change as its added lines (diff.py) and runs it; only the place is
        # wrong: entries a merge put between historical ones
        tail = set(range(total - len(extra), total))
        warnings.extend(StyleWarning("inserted-mid-file", f"head:{head.start_lines[i]}: new "
                                     f"entry {i} sits between historical entries; append new "
                                     f"entries at the end") for i in extra if i not in tail)
        return ChangeReport(base_count=n, warnings=warnings,
                            new_entries=[head.entries[i] for i in extra],
                            new_start_lines=[head.start_lines[i] for i in extra])
    before = len(warnings)
    report = ChangeReport(base_count=n, corrections=_history(base, head, warnings),
                          warnings=warnings, new_entries=head.entries[n:],
                          new_start_lines=head.start_lines[n:])
    if len(warnings) == before:  # history intact: the bytes around it are the question
        _layout(base, head, report.corrections, warnings)
    return report


def _new_entry_rules(report: ChangeReport, known_keys: Collection[str],
                     pr_number: int | None) -> None:
    warnings = report.warnings
    if report.corrections and report.new_entries:
        warnings.append(StyleWarning("pr-link-correction", f"a pr-link correction (entries "
                                     f"{report.corrections}) is mixed with new entries; make "
                                     f"two changes"))
    for entry, line in zip(report.new_entries, report.new_start_lines, strict=True):
        if problem := pr_link_problem(entry.pr_link):
            warnings.append(StyleWarning("pr-link", f"head:{line}: {problem}"))
        elif pr_number is not None and entry.pr_link.rsplit("/", 1)[-1] not in (
                str(pr_number), PR_LINK_PLACEHOLDER_ID):
            warnings.append(StyleWarning("pr-link", f"head:{line}: pr-link {entry.pr_link!r} "
                                         f"must name this PR ({pr_number}) or the placeholder "
                                         f"{PR_LINK_PLACEHOLDER_ID}"))
        for pattern in entry.config_keys:
            if problem := key_problem(pattern, known_keys):
                warnings.append(StyleWarning("config-key", f"head:{line}: {problem}"))
