"""The gate: whether InferenceX's CI accepts a change of the changelog, and what it runs.

CI's `check-changelog` job runs utils/validate_perf_changelog.py (InferenceX 843c6254f
.github/workflows/run-sweep.yml:107-124), whose `main` checks two things only
(utils/validate_perf_changelog.py:342-363): the head file ends with a newline, and
utils/process_changelog.py accepts the diff and prints valid JSON. So a change passes here
exactly when it ends with a newline and its job document can be built (jobs.py); kvbench's
layout rules (style.py) come back as named warnings, refused only with `strict`."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.changelog.diff import AddedText
from kvbench.changelog.jobs import JobFlags, Revision, search_space
from kvbench.changelog.parse import changelog_error
from kvbench.changelog.search_space import SearchSpace
from kvbench.changelog.style import ChangeReport, StyleWarning, style_report
from kvbench.errors import ChangelogError


@dataclass(slots=True)
class GateReport:
    """An accepted change: its job document and the layout rules it breaks."""

    search_space: SearchSpace
    warnings: list[StyleWarning] = field(default_factory=list)

    def to_json(self) -> dict:
        doc = self.search_space
        buckets = {name: sum(len(rows) for rows in getattr(doc, name).values())
                   for name in ("single_node", "multi_node")}
        buckets |= {name: len(getattr(doc, name)) for name in
                    ("evals", "agentic_evals", "multinode_evals", "multinode_agentic_evals")}
        return {
            "accepted": True,
            "new-entries": [e.model_dump(by_alias=True, exclude_defaults=True)
                            for e in doc.changelog_metadata.entries],
            "rows": buckets,
            "warnings": [{"name": w.name, "message": w.message} for w in self.warnings],
        }


def gate(head_raw: bytes, added: AddedText, head: Revision,
         base: Callable[[], Revision] | None, *, base_ref: str, head_ref: str,
         flags: JobFlags = JobFlags(), layout: str = "classic",
         style: Callable[[], ChangeReport] | None = None, strict: bool = False) -> GateReport:
    """CI's verdict on a change (ChangelogError when it refuses), with the style warnings
    `style` computes (none when it is None)."""
    if not head_raw.endswith(b"\n"):
        raise ChangelogError("the head changelog does not end with a newline (CI's gate, "
                             "validate_perf_changelog.py:352, refuses it)",
                             hint="end the file with '\\n'")
    doc = search_space(added, head, base, base_ref=base_ref, head_ref=head_ref, flags=flags,
                       layout=layout)
    warnings = style().warnings if style is not None else []
    if strict and warnings:
        raise changelog_error("the change breaks kvbench's layout rules (--strict)",
                              [str(w) for w in warnings])
    return GateReport(doc, warnings)


def check_change(base_raw: bytes, head_raw: bytes, known_keys, *,
                 pr_number: int | None = None) -> ChangeReport:
    """The layout rules alone, strictly: raise ChangelogError listing every broken rule.
    For writers of the file (`recipe mirror`), whose changes must pass them all."""
    if not head_raw.endswith(b"\n"):
        raise changelog_error("the changelog change is invalid",
                              ["head: no final newline; end the file with exactly one '\\n'"])
    report = style_report(base_raw, head_raw, known_keys, pr_number=pr_number)
    if report.warnings:
        raise changelog_error("the changelog change is invalid", [str(w) for w in
                                                                  report.warnings])
    return report


def check_files(base_file: Path | None, head_file: Path,
                config_files: Sequence[Path] | None = None, *,
                pr_number: int | None = None) -> ChangeReport:
    """`check_change` on two files; a missing base means the file is new."""
    from kvbench.changelog.keys import default_config_files, known_config_keys

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


@contextmanager
def revision_at_ref(ref: str, repo: Path, files: Sequence[Path], runner_config: Path):
    """The master configs and runners file as they are at `ref`, written to a temporary
    folder (process_changelog.py:159-206 does the same for an append-only base)."""
    with tempfile.TemporaryDirectory(prefix="kvbench-base-") as tmp:
        root = repo.resolve()
        copies = []
        for path in [*files, runner_config]:
            try:
                rel = Path(path).resolve().relative_to(root).as_posix()
            except ValueError:
                raise ChangelogError(f"{path} is not in the repository {repo}, so its version "
                                     f"at {ref} cannot be read for the append-only entries",
                                     hint="pass --base-config-files and --base-runner-config"
                                     ) from None
            raw = read_at_ref(ref, rel, repo)
            if not raw:
                raise ChangelogError(f"{rel} does not exist at {ref}: the base revision lacks "
                                     f"a generator input an append-only entry needs")
            copy = Path(tmp) / rel
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(raw)
            copies.append(copy)
        yield Revision(tuple(copies[:-1]), copies[-1])

