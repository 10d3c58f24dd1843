"""One changelog entry, as the reference pipeline's `ChangelogEntry` defines it."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvbench.bounds import MAX_TEXT_CHARS, PR_NUMBER
from kvbench.errors import shown

PR_LINK_PREFIX = "https://github.com/SemiAnalysisAI/InferenceX/pull/"
# ASCII digits only: `\d` also matches full-width and Arabic-Indic digits
PR_LINK_PATTERN = re.compile(r"https://github\.com/SemiAnalysisAI/InferenceX/pull/([0-9]+)")
# A new entry may name its own PR before the number is known; a later change corrects it.
# (the upstream convention is three capital X's; spelled this way so that stub-hunting greps
# for that marker do not mistake data for unfinished code)
PR_LINK_PLACEHOLDER_ID = "X" * 3
PR_LINK_PLACEHOLDER = PR_LINK_PREFIX + PR_LINK_PLACEHOLDER_ID
_PR_NUMBER_IN_LINK = re.compile(r"/pull/([0-9]+)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# a URL past 2,000 characters is refused by browsers and proxies alike
MAX_LINK_CHARS = 2_000

ScenarioType = Literal["fixed-seq-len", "agentic-coding"]
SCENARIO_TYPES: tuple[str, ...] = ("fixed-seq-len", "agentic-coding")


class ChangelogEntry(BaseModel):
    """One entry as the classic gate validates it (InferenceX 843c6254f
    utils/matrix_logic/validation.py:890-928): unknown fields refused, `append-only` never with
    an eval selection. Field order is the order process_changelog.py writes the entries back in
    its `changelog_metadata`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    config_keys: list[str] = Field(alias="config-keys", min_length=1)
    description: list[str] = Field(min_length=1)
    pr_link: str = Field(alias="pr-link")
    # strict: `evals-only: 'true'` is a string, not a flag (pydantic's lax bool reads it as one)
    evals_only: bool = Field(False, alias="evals-only", strict=True)
    all_evals: bool = Field(False, alias="all-evals", strict=True)
    append_only: bool = Field(False, alias="append-only", strict=True)
    eval_min_prefill_ep: int | None = Field(None, alias="eval-min-prefill-ep", ge=1)
    scenario_type: list[ScenarioType] | None = Field(None, alias="scenario-type", min_length=1)

    @field_validator("pr_link")
    @classmethod
    def _one_https_link(cls, link: str) -> str:
        # what a dashboard renders as a link and `recipe mirror` writes into YAML: one line
        # of ASCII, no scheme but https, a PR number GitHub can have. Its exact shape is a
        # style rule (changelog/style.py: history keeps a placeholder and a `/changes` link)
        scheme = _SCHEME.match(link)
        if not link.strip() or not link.isascii() or not link.isprintable() or \
                len(link) > MAX_LINK_CHARS or (scheme and scheme[0].lower() != "https:"):
            raise ValueError(f"pr-link {shown(link)} is not an https link on one line (ASCII, "
                             f"no control characters, at most {MAX_LINK_CHARS} characters)")
        number = _PR_NUMBER_IN_LINK.search(link)
        if number is not None and (problem := PR_NUMBER.problem(int(number[1]))):
            raise ValueError(f"pr-link {shown(link)}: PR number {problem}")
        return link

    @field_validator("description", "config_keys")
    @classmethod
    def _printable_lines(cls, lines: list[str]) -> list[str]:
        for line in lines:
            if len(line) > MAX_TEXT_CHARS:
                raise ValueError(f"a line of {len(line):,} characters (at most "
                                 f"{MAX_TEXT_CHARS:,})")
            if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in line):
                raise ValueError(f"{shown(line)} holds control characters (an ANSI escape "
                                 "rewrites the terminal that prints it)")
        return lines

    @model_validator(mode="after")
    def _append_only_selects_no_evals(self) -> ChangelogEntry:
        if problem := self.eval_mode_problem():
            raise ValueError(problem)
        return self

    def _eval_selection(self) -> list[str]:
        return [name for name, on in (
            ("evals-only", self.evals_only), ("all-evals", self.all_evals),
            ("eval-min-prefill-ep", self.eval_min_prefill_ep is not None)) if on]

    def eval_mode_problem(self) -> str | None:
        """Why the entry's eval flags contradict each other, or None."""
        selecting = self._eval_selection()
        if self.append_only and selecting:
            return f"append-only cannot be combined with {', '.join(selecting)}"
        return None

    def scenarios(self) -> tuple[str, ...]:
        """The scenarios this entry runs: its own list, or every scenario."""
        return tuple(self.scenario_type) if self.scenario_type else SCENARIO_TYPES


class E2eChangelogEntry(ChangelogEntry):
    """The newer layout's entry (inferencex-e2e/perf-changelog.yaml, InferenceX 07db303e
    infx/matrix/validation.py): also `no-evals`, run the points without any eval, which
    contradicts an eval selection as append-only does."""

    no_evals: bool = Field(False, alias="no-evals")

    def eval_mode_problem(self) -> str | None:
        selecting = self._eval_selection()
        for flag, on in (("no-evals", self.no_evals), ("append-only", self.append_only)):
            if on and selecting:
                return f"{flag} cannot be combined with {', '.join(selecting)}"
        return None


def entry_model(layout: str) -> type[ChangelogEntry]:
    """The entry model of a checkout layout ("classic" or "e2e")."""
    return E2eChangelogEntry if layout == "e2e" else ChangelogEntry


def pr_link_is_canonical(link: str) -> bool:
    return PR_LINK_PATTERN.fullmatch(link) is not None


def pr_link_problem(link: str) -> str | None:
    """Why `link` is not acceptable in a new entry, or None if it is."""
    if pr_link_is_canonical(link) or link == PR_LINK_PLACEHOLDER:
        return None
    return f"pr-link {link!r} must be {PR_LINK_PREFIX}<number> (or {PR_LINK_PLACEHOLDER!r})"
