"""The lines a change adds to the changelog, as InferenceX's CI reads them: from `git diff`.

CI's job JSON comes from the added lines of `git diff BASE HEAD -- perf-changelog.yaml` only
(InferenceX 843c6254f utils/process_changelog.py:43-67): every `+` line is kept, and a `-`
line with anything but whitespace refuses the change. So a change is read the way git's diff
aligns it, and kvbench asks git for that diff too, with git's default algorithm pinned (a
user's `diff.algorithm` would otherwise move the added lines). Two files are compared with
`git diff --no-index`, the same algorithm."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvbench.errors import ChangelogError

# git's defaults, spelled out: CI runs git unconfigured (Myers with the indent heuristic)
_DIFF = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--diff-algorithm=myers",
         "--indent-heuristic"]


@dataclass(frozen=True, slots=True)
class AddedText:
    """The added lines of a change joined by newlines (as process_changelog.py:67 joins
    them), and the whitespace-only lines it deletes (which CI allows)."""

    text: str
    deleted_blank_lines: int = 0


def _git() -> str:
    git = shutil.which("git")
    if git is None:
        raise ChangelogError("git is not installed: the changelog change is read from git's "
                             "diff, as InferenceX's CI reads it",
                             hint="install git (the check needs `git diff`)")
    return git


def _added(diff: str, where: str) -> AddedText:
    added: list[str] = []
    blank_deletions = 0
    for line in diff.split("\n"):
        # the file headers start with '---'/'+++'; process_changelog.py:52,64 skips every
        # line starting so, as this does
        if line.startswith("-") and not line.startswith("---"):
            if line[1:].strip():
                raise ChangelogError(
                    f"{where}: a line is deleted: {line[1:].strip()[:120]!r}; the changelog "
                    f"is append-only (CI's process_changelog.py refuses any deleted line that "
                    f"is not blank)", hint="restore the line and append a new entry instead")
            blank_deletions += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    return AddedText("\n".join(added), blank_deletions)


def _run(argv: list[str], cwd: Path | None, what: str, ok: tuple[int, ...]) -> str:
    out = subprocess.run(argv, cwd=cwd, capture_output=True)
    if out.returncode not in ok:
        detail = out.stderr.decode("utf-8", "replace").strip().splitlines()
        last = detail[-1] if detail else f"exit status {out.returncode}"
        raise ChangelogError(f"git diff of {what} failed: {last}")
    try:
        text = out.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChangelogError(f"{what}: the change is not UTF-8 (byte {e.start} of the diff)",
                             hint="save the changelog as UTF-8") from None
    # CI reads the diff in text mode (process_changelog.py:44-48, text=True): universal
    # newlines, so a carriage return ends a line there as well
    return text.replace("\r\n", "\n").replace("\r", "\n")


def added_between_refs(base: str, head: str, path: str, repo: Path) -> AddedText:
    """The added lines of `path` from git ref `base` to `head` in `repo`."""
    argv = [_git(), "-C", str(repo), *_DIFF, base, head, "--", path]
    return _added(_run(argv, None, f"{path} {base}..{head}", (0,)), path)


def added_between_files(base: Path | None, head: Path) -> AddedText:
    """The added lines from file `base` (None: the file is new) to file `head`."""
    old = str(base) if base is not None else "/dev/null"
    # --no-index exits 1 when the files differ (it implies --exit-code)
    argv = [_git(), *_DIFF, "--no-index", "--", old, str(head)]
    return _added(_run(argv, None, f"{old} and {head}", (0, 1)), str(head))
