"""kvbench's changelog gate and job document against InferenceX's own, as recorded.

tests/changelog/golden/golden.tar.xz holds what InferenceX 843c6254f's
`utils/validate_perf_changelog.py` and `utils/process_changelog.py` said (exit status, stdout,
stderr) about the last 40 changelog commits at 843c6254f and 23 crafted changes, with the
inputs of each (golden/README.md; golden/record.py re-creates it from a checkout). Each case
runs kvbench's gate on the same inputs: it accepts exactly what the gate accepted, and its job
document is byte for byte process_changelog.py's, with every modifier the workflow passes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

from kvbench.changelog import JobFlags, Revision, gate, style_report
from kvbench.changelog.diff import added_between_files
from kvbench.errors import ChangelogError

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = sorted(json.loads((GOLDEN / "summary.json").read_text()))
FLAGS = {"default": JobFlags(), "trim-conc": JobFlags(trim_conc=True),
         "all-evals": JobFlags(all_evals=True), "evals-only": JobFlags(evals_only=True)}
# why CI refused each refused case (the last line of its stderr), and kvbench's words for it
REFUSALS = {
    "question-mark-key": ("Config key 'dsr1-fp8-h200-sglang-mt?' not found",
                          "'dsr1-fp8-h200-sglang-mt?' matches no config key"),
    "unknown-key": ("Config key 'dsv4-fp4-b200-vllm-agentic-mtpx' not found",
                    "'dsv4-fp4-b200-vllm-agentic-mtpx' matches no config key"),
    "glob-no-match": ("No config keys matched the wildcard pattern 'nosuchmodel-*'",
                      "pattern 'nosuchmodel-*' matches no config key"),
    "deleted-line": ("Deletions are not allowed", "a line is deleted"),
    "no-final-newline": ("does not end with a newline", "does not end with a newline"),
    "invalid-yaml": ("ScannerError", "the added lines are not valid YAML"),
    "unknown-field": ("extra_forbidden", "no-evals: Extra inputs are not permitted"),
    "append-only-with-evals": ("append-only cannot be combined with eval selection",
                               "append-only cannot be combined with evals-only"),
    "append-only-mixed": ("cannot share a sweep with regular changelog entries",
                          "cannot share a change with regular entries"),
    "append-only-removes-point": ("may not remove existing concurrency points: [14]",
                                  "may not remove existing concurrency points: [14]"),
    "append-only-unrelated-config": ("changed configs not selected by its changelog entry",
                                     "edits configs its entries do not name: "
                                     "['qwen3.5-fp8-h200-sglang-agentic-hicache-mtp']"),
    "history-line-added": ("model_type", "added entry 1: (top level): Input should be a valid"),
    "blank-line-only": ("No additions found", "the change adds nothing"),
}
APPEND_ONLY_LABELS = "cannot run with --all-evals or --evals-only"


@cache
def recordings() -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(GOLDEN / "golden.tar.xz") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        blobs = {m.name.removeprefix("blobs/"): tar.extractfile(m).read()
                 for m in tar.getmembers() if m.name.startswith("blobs/")}
    return manifest, blobs


def materialize(name: str, root: Path) -> tuple[dict, dict[str, Path]]:
    """The case's inputs as files under `root`: changelogs, master configs, runners."""
    manifest, blobs = recordings()
    case = manifest["cases"][name]
    paths: dict[str, Path] = {}
    for side in ("base", "head"):
        folder = root / side / "configs"
        folder.mkdir(parents=True)
        inputs = case["inputs"]
        (root / side / "perf-changelog.yaml").write_bytes(blobs[inputs[f"{side}-changelog"]])
        for file, blob in zip(("amd-master.yaml", "nvidia-master.yaml"),
                              inputs[f"{side}-configs"], strict=True):
            (folder / file).write_bytes(blobs[blob])
        (folder / "runners.yaml").write_bytes(blobs[inputs[f"{side}-runners"]])
        paths[side] = root / side
    return case, paths


def revision(side: Path) -> Revision:
    configs = side / "configs"
    return Revision((configs / "amd-master.yaml", configs / "nvidia-master.yaml"),
                    configs / "runners.yaml")


def run_gate(case: dict, paths: dict[str, Path], flags: JobFlags):
    head_file = paths["head"] / "perf-changelog.yaml"
    added = added_between_files(paths["base"] / "perf-changelog.yaml", head_file)
    return gate(head_file.read_bytes(), added, revision(paths["head"]),
                lambda: revision(paths["base"]), base_ref=case["base-ref"],
                head_ref=case["head-ref"], flags=flags)


def test_the_recordings_cover_the_last_40_commits_and_the_crafted_changes():
    manifest, _ = recordings()
    kinds = [c["kind"] for c in manifest["cases"].values()]
    assert manifest["inferencex"].startswith("843c6254f")
    assert kinds.count("commit") == 40 and kinds.count("crafted") == 23
    refused = {n for n, c in manifest["cases"].items() if c["runs"]["gate"]["rc"]}
    assert refused == set(REFUSALS)  # every real commit passed CI's gate


@pytest.mark.parametrize("name", CASES)
def test_gate_and_job_document_equal_inferencex(name, tmp_path):
    case, paths = materialize(name, tmp_path)
    _, blobs = recordings()
    runs = case["runs"]
    if runs["gate"]["rc"]:
        why, ours = REFUSALS[name]
        assert why in blobs[runs["gate"]["stderr"]].decode()
        with pytest.raises(ChangelogError) as refused:
            run_gate(case, paths, FLAGS["default"])
        assert ours in " ".join([refused.value.message, *getattr(refused.value, "errors", [])])
        return
    for variant, flags in FLAGS.items():
        run = runs[variant]
        if run["rc"]:
            assert "append-only sweeps cannot use all-evals or evals-only" in blobs[
                run["stderr"]].decode()
            with pytest.raises(ChangelogError, match=APPEND_ONLY_LABELS):
                run_gate(case, paths, flags)
            continue
        ours = run_gate(case, paths, flags).search_space.to_json()
        assert ours == blobs[run["stdout"]].decode().rstrip("\n"), variant


@pytest.mark.parametrize(("name", "warned"), [
    ("056876ec1", ["inserted-mid-file"]),    # PR 2700: merged between historical entries
    ("de871da96", ["separator-blank-lines", "whitespace-separator"]),
    ("5caeb6be2", ["not-appended-at-end"]),  # deletes a whitespace-only line of history
    ("843c6254f", []),
    ("placeholder-and-spacing", ["separator-blank-lines", "whitespace-separator"]),
    ("duplicate-field", ["file-invalid"]),
    ("mid-file-insert", ["inserted-mid-file"]),
])
def test_layout_rules_are_warnings_on_accepted_changes(name, warned, tmp_path):
    case, paths = materialize(name, tmp_path)
    base = (paths["base"] / "perf-changelog.yaml").read_bytes()
    head = (paths["head"] / "perf-changelog.yaml").read_bytes()
    keys = set(case["kept-keys"])
    report = style_report(base, head, keys)
    assert [w.name for w in report.warnings] == warned
    assert run_gate(case, paths, JobFlags()).search_space  # and CI accepts it all the same


def kvbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kvbench", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_cli_on_git_refs_prints_what_ci_reads(tmp_path):
    """The real command on a repository whose two commits are PR 2676's change (append-only
    rows against the base revision, read from git): the document CI's workflow reads, and
    the check's verdict with its warnings."""
    case, paths = materialize("de871da96", tmp_path / "inputs")
    repo = tmp_path / "repo"
    for i, side in enumerate(("base", "head")):
        subprocess.run(["cp", "-rT", str(paths[side]), str(repo)], check=True)
        if i == 0:
            git(repo.parent, "init", "-q", "-b", "main", str(repo))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", side)
    base, head = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    out = kvbench("changelog", "jobs", "--base", base, "--head", head, cwd=repo)
    assert out.returncode == 0, out.stderr
    _, blobs = recordings()
    recorded = json.loads(blobs[case["runs"]["default"]["stdout"]])
    ours = json.loads(out.stdout)
    assert ours["changelog_metadata"].pop("base_ref") == base
    assert ours["changelog_metadata"].pop("head_ref") == head
    del recorded["changelog_metadata"]["base_ref"], recorded["changelog_metadata"]["head_ref"]
    assert ours == recorded
    check = kvbench("changelog", "check", "--base", base, "--head", head, "--format", "json",
                    cwd=repo)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["rows"]["multi_node"] == 7
    assert [w["name"] for w in report["warnings"]] == ["separator-blank-lines",
                                                       "whitespace-separator"]
    strict = kvbench("changelog", "check", "--base", base, "--head", head, "--strict",
                     cwd=repo)
    assert strict.returncode == 2 and "separator-blank-lines" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_cli_files_refusal_is_one_clear_line(tmp_path):
    _, paths = materialize("deleted-line", tmp_path)
    out = kvbench("changelog", "check", "--base-file", str(paths["base"] / "perf-changelog.yaml"),
                  "--head-file", str(paths["head"] / "perf-changelog.yaml"))
    assert out.returncode == 2
    assert "a line is deleted" in out.stderr and "Traceback" not in out.stderr


def test_document_bytes_are_what_the_workflow_parses():
    """A recorded document parses with the workflow's expectations: buckets by seq-len name
    or `agentic`, a fingerprint on every benchmark row, none on eval rows."""
    manifest, blobs = recordings()
    doc = json.load(io.BytesIO(blobs[manifest["cases"]["fixed-glob"]["runs"]["default"][
        "stdout"]]))
    assert set(doc["single_node"]) == {"8k1k"} and set(doc["multi_node"]) == {"1k1k", "8k1k"}
    assert all(len(r["recipe-fingerprint"]) == 64 for rows in doc["single_node"].values()
               for r in rows)
    assert doc["evals"] and all("recipe-fingerprint" not in r for r in doc["evals"])
