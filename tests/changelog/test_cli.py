"""`kvbench changelog check` on git refs and on files, through the real CLI boundary: CI's
verdict (refusals exit 2 with one clear line) and kvbench's layout warnings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from changelog.conftest import MASTERS, append, path_of
from conftest import REPO


def kvbench(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kvbench", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


def git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, real_raw):
    """A git repo laid out like InferenceX: configs/ and perf-changelog.yaml, two commits."""
    (tmp_path / "configs").mkdir()
    for m in [*MASTERS, MASTERS[0].parent / "runners.yaml"]:
        shutil.copy(m, tmp_path / "configs" / m.name)
    (tmp_path / "perf-changelog.yaml").write_bytes(real_raw)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    return tmp_path


def commit_head(repo, raw: bytes) -> None:
    (repo / "perf-changelog.yaml").write_bytes(raw)
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "head")


@pytest.mark.slow
def test_check_git_refs_ok(repo, real_raw):
    commit_head(repo, append(real_raw))
    out = kvbench("changelog", "check", "--base", "HEAD~1", "--head", "HEAD",
                  "--format", "json", cwd=repo)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["accepted"] and report["warnings"] == []
    assert report["new-entries"][0]["config-keys"] == ["dsv4-fp4-b200-vllm-agentic-mtp"]
    assert report["rows"]["single_node"] == 10


@pytest.mark.slow
def test_check_git_refs_rejects_edit(repo, real_raw):
    commit_head(repo, real_raw.replace(b"6-7% uplift", b"9% uplift", 1))
    out = kvbench("changelog", "check", "--base", "HEAD~1", "--head", "HEAD", cwd=repo)
    assert out.returncode == 2
    assert "a line is deleted" in out.stderr and "6-7% uplift" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_ref(repo):
    out = kvbench("changelog", "check", "--base", "nope", "--head", "HEAD", cwd=repo)
    assert out.returncode == 2
    assert "git ref 'nope' not found" in out.stderr


def test_check_files(tmp_path, real_raw):
    base = path_of(tmp_path, "old.yaml", real_raw)
    head = path_of(tmp_path, "new.yaml", append(real_raw, sep="\n\n"))
    out = kvbench("changelog", "check", "--base-file", str(base), "--head-file", str(head),
                  "--config-files", str(MASTERS[0]), "--config-files", str(MASTERS[1]))
    # CI accepts two blank lines before an entry; kvbench names the rule it breaks
    assert out.returncode == 0, out.stderr
    assert "ok: CI's gate accepts the change: 1 new entry (single_node 10" in out.stdout
    assert "warning[separator-blank-lines]: head:6383: 2 blank lines" in out.stdout
    strict = kvbench("changelog", "check", "--base-file", str(base), "--head-file", str(head),
                     "--config-files", str(MASTERS[0]), "--config-files", str(MASTERS[1]),
                     "--strict")
    assert strict.returncode == 2 and "2 blank lines before this entry" in strict.stderr


def test_refs_and_files_are_exclusive(tmp_path):
    out = kvbench("changelog", "check", "--base", "main", "--head-file", str(tmp_path))
    assert out.returncode == 2
    assert "not both" in out.stderr


def test_broken_master_config_is_reported(tmp_path, real_raw):
    bad = tmp_path / "bad-master.yaml"
    bad.write_text("k:\n  image: x\n  model: m\n")
    base = path_of(tmp_path, "old.yaml", real_raw)
    head = path_of(tmp_path, "new.yaml", append(real_raw))
    out = kvbench("changelog", "check", "--base-file", str(base), "--head-file", str(head),
                  "--config-files", str(bad), "--runner-config",
                  str(MASTERS[0].parent / "runners.yaml"))
    assert out.returncode == 2
    assert "bad-master.yaml" in out.stderr and "Traceback" not in out.stderr
