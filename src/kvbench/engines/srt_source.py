"""Where an srt-slurm recipe comes from when the InferenceX checkout does not hold it.

InferenceX's NVIDIA multi-node runners clone an srt-slurm repository at a ref chosen per row
(data/srt_slurm_sources.yaml, from runners/launch_<x>.sh at 843c6254f) and copy the checkout's
recipe folders over it; a `CONFIG_FILE=` the checkout lacks is read from the clone. kvbench does
the same lookup against local clones the user names in KVBENCH_SRT_SLURM (paths separated by
`:`; a clone is matched by its `origin` URL, or by a folder named `owner+name`), reading the
file at the ref with `git show`; with no such clone, the refusal names the repository, ref and
runner line to fetch."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.errors import EngineError

DATA = Path(__file__).resolve().parent / "data" / "srt_slurm_sources.yaml"
CLONES_ENV = "KVBENCH_SRT_SLURM"
_URL = re.compile(r"[:/](?P<repo>[\w.-]+/[\w.-]+?)(?:\.git)?/?$")


class SourceRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: dict[str, str | list[str]]
    repo: str
    ref: str | None
    line: int


class Sources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scripts: dict[str, list[SourceRule]] = Field(min_length=1)


@cache
def sources() -> Sources:
    return Sources.model_validate(yamldoc.load_file(DATA, "srt-slurm sources", EngineError))


@dataclass(frozen=True, slots=True)
class Source:
    """The clone a runner makes for a row: repository (owner/name), ref, the rule's place."""

    repo: str
    ref: str | None
    script: str
    line: int

    @property
    def where(self) -> str:
        ref = self.ref or "its default branch"
        return (f"{self.repo}@{ref} (InferenceX 843c6254f runners/launch_{self.script}.sh:"
                f"{self.line})")


def _holds(rule: SourceRule, row: dict[str, Any], config_file: str) -> bool:
    values = {"framework": row.get("framework"), "model-prefix": row.get("model-prefix"),
              "precision": row.get("precision"), "spec-decoding": row.get("spec-decoding"),
              "config-file": config_file}
    for key, want in rule.when.items():
        got = values.get(key)
        if key == "config-file":
            if got is None or not fnmatch.fnmatchcase(str(got), str(want)):
                return False
        elif got not in (want if isinstance(want, list) else [want]):
            return False
    return True


def source_for(row: dict[str, Any], config_file: str, runners: Any | None) -> Source | None:
    """The srt-slurm clone the runner of `row` makes, or None when its runner label resolves
    to no script of the table (an AMD runner, say). The script is the runner name's part
    before `_` (`launch_${RUNNER_NAME%%_*}.sh`), over the label's nodes in runners.yaml."""
    if row.get("scenario-type") == "agentic-coding":
        return None  # the table holds the fixed-seq-len branches only (its header says why)
    label = str(row.get("runner", ""))
    # a label runners.yaml does not list is a runner name of its own (GitHub's runs-on)
    names = (runners.nodes_for(label) if runners is not None else []) or [
        label.removeprefix("cluster:")]
    scripts = {n.rsplit("_", 1)[0] for n in names}
    known = sources().scripts
    for script in sorted(scripts & known.keys()):
        for rule in known[script]:
            if _holds(rule, row, config_file):
                return Source(rule.repo, rule.ref, script, rule.line)
    return None


def _clone_repo(path: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(path), "config", "--get", "remote.origin.url"],
                         capture_output=True, text=True)
    match = _URL.search(out.stdout.strip()) if out.returncode == 0 else None
    if match:
        return match.group("repo").lower()
    for folder in (path, path.parent):
        if "+" in folder.name:
            return folder.name.replace("+", "/", 1).lower()
    return None


def clones() -> dict[str, Path]:
    """owner/name (lower case) -> local clone, from KVBENCH_SRT_SLURM."""
    out: dict[str, Path] = {}
    for entry in filter(None, os.environ.get(CLONES_ENV, "").split(os.pathsep)):
        path = Path(entry).expanduser()
        if path.is_dir() and (repo := _clone_repo(path)):
            out.setdefault(repo, path)
    return out


def read_recipe(source: Source, name: str) -> tuple[str, str] | None:
    """(the file's text, where it was read) from a local clone of the source at its ref;
    None when no clone of the repository is named, or it lacks the ref or the file."""
    clone = clones().get(source.repo.lower())
    if clone is None:
        return None
    refs = [source.ref, f"origin/{source.ref}"] if source.ref else ["HEAD"]
    for ref in refs:
        out = subprocess.run(["git", "-C", str(clone), "show", f"{ref}:{name}"],
                             capture_output=True)
        if out.returncode == 0:
            try:
                return out.stdout.decode("utf-8"), f"{clone} at {ref}"
            except UnicodeDecodeError:
                raise EngineError(f"{name} at {source.where} is not UTF-8") from None
    return None
