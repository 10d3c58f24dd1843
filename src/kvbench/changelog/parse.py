"""Read a changelog strictly: bytes-level rules first, then YAML, then each entry's schema.

Every violation is collected so one run of the checker names all of them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml
from pydantic import ValidationError

from kvbench.changelog.entry import ChangelogEntry
from kvbench.errors import ChangelogError

ENTRY_START = re.compile(r"^- config-keys:\s*$")


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is ~10x faster


class _StrictLoader(_Base):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


@dataclass(slots=True)
class ParsedChangelog:
    """A changelog's text, its raw entry mappings and their validated models."""

    text: str
    raw_entries: list[dict] = field(default_factory=list)
    entries: list[ChangelogEntry] = field(default_factory=list)
    start_lines: list[int] = field(default_factory=list)  # 1-based line of each "- config-keys:"

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


def changelog_error(message: str, errors: list[str], hint: str | None = None) -> ChangelogError:
    """A ChangelogError whose `errors` list the CLI prints one per line."""
    err = ChangelogError(f"{message} ({len(errors)} problem{'s' * (len(errors) != 1)})",
                         hint=hint)
    err.errors = [err.message, *errors]
    return err


def _decoded(raw: bytes, source: str) -> tuple[str, list[str]]:
    problems: list[str] = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return "", [f"{source}: not UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})"]
    for bad, name in (("\r", "a carriage return (CR)"), ("\t", "a tab"), ("\x00", "a NUL byte")):
        for lineno, line in enumerate(text.split("\n"), 1):
            if bad in line:
                problems.append(f"{source}:{lineno}: contains {name}; use LF line ends and spaces")
                break
    if text and not text.endswith("\n"):
        problems.append(f"{source}: no final newline; end the file with exactly one '\\n'")
    elif text.endswith("\n\n"):
        problems.append(f"{source}: blank line(s) at the end; end with exactly one '\\n'")
    return text, problems


def byte_problems(raw: bytes, source: str) -> list[str]:
    """The byte-level rules the file breaks: UTF-8, no CR, tab or NUL, one final newline."""
    return _decoded(raw, source)[1]


def parse_changelog(raw: bytes, source: str = "perf-changelog.yaml", *, byte_rules: bool = True,
                    model: type[ChangelogEntry] = ChangelogEntry, first_line: int = 1,
                    first_entry: int = 0) -> ParsedChangelog:
    """Parse and validate a whole changelog; raise ChangelogError listing every problem
    (`byte_rules` off: only what stops it from being read). `raw` may be the tail of a file
    whose first line is `first_line` and first entry `first_entry` (for the messages)."""
    text, problems = _decoded(raw, source)
    if not byte_rules and text:
        problems = []
    if problems and not text:
        raise changelog_error(f"{source} cannot be read", problems)
    parsed = ParsedChangelog(text=text)
    if not text.strip():
        if problems:
            raise changelog_error(f"{source} is invalid", problems)
        return parsed
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + first_line}" if mark else source
        problem = getattr(e, "problem", None) or str(e)
        raise changelog_error(f"{source} is not valid YAML",
                              [*problems, f"{where}: {problem}"]) from None
    if not isinstance(data, list):
        raise changelog_error(f"{source} is invalid",
                              [*problems, f"{source}: the root must be a list of entries, "
                                          f"got {type(data).__name__}"])
    for i, (item, item_node) in enumerate(zip(data, node.value, strict=True), first_entry):
        line = item_node.start_mark.line + first_line
        parsed.start_lines.append(line)
        if not isinstance(item, dict):
            problems.append(f"{source}:{line}: entry {i} must be a mapping, got "
                            f"{type(item).__name__}")
            continue
        parsed.raw_entries.append(item)
        try:
            parsed.entries.append(model.model_validate(item))
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                problems.append(f"{source}:{line}: entry {i}: {loc}: {err['msg']} "
                                f"(got {err.get('input')!r})")
    starts = sum(1 for ln in text.split("\n") if ENTRY_START.match(ln))
    if starts != len(data):
        problems.append(f"{source}: {len(data)} entries but {starts} lines '- config-keys:'; "
                        f"every entry must start with '- config-keys:' at column 0")
    if problems:
        raise changelog_error(f"{source} is invalid", problems)
    return parsed
