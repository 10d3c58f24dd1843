"""Record what InferenceX's changelog gate says about real and crafted changelog changes.

    python3 tests/changelog/golden/record.py INFERENCEX_GIT_DIR PYTHON [--rev 843c6254f]

For each of the last 40 commits that touch `perf-changelog.yaml` at REV (base: its first
parent), and for the crafted changes of `crafted.json` (each applied on top of REV), this
script checks the commit out in a temporary shared clone and runs, from its root, the two
programs InferenceX's `run-sweep.yml` runs (`.github/workflows/run-sweep.yml:107-124` the gate,
`:296-349` the job JSON):

    PYTHON utils/validate_perf_changelog.py --changelog-file perf-changelog.yaml \
        --base-ref BASE --head-ref HEAD
    PYTHON utils/process_changelog.py --changelog-file perf-changelog.yaml \
        --base-ref BASE --head-ref HEAD [--trim-conc | --all-evals | --evals-only]

with PYTHON's directory first on PATH (process_changelog.py runs the generator as `python3`,
as `uv run` does in CI). It writes `golden.tar.xz` beside itself: `manifest.json` (per case:
the refs, each run's exit status and the blob names of its stdout/stderr and inputs) and
`blobs/<sha256>`, the files each case's inputs and outputs are (deduplicated; xz folds the
41 near-identical 400 KB changelogs into little). The inputs kept per case: the changelog at
base and head; the master configs at head (and at base, which an `append-only` entry reads),
cut to the top-level keys the new entries name, the keys that differ between base and head,
and the first key of each file; `configs/runners.yaml` at head and base. `summary.json` lists
each case's verdicts for reading. Needs git and a PYTHON with pydantic and PyYAML (CI:
`pip install pydantic pyyaml`, Python 3.12). Not run by the tests."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CHANGELOG = "perf-changelog.yaml"
MASTERS = ("configs/amd-master.yaml", "configs/nvidia-master.yaml")
RUNNERS = "configs/runners.yaml"
VARIANTS = {"default": [], "trim-conc": ["--trim-conc"], "all-evals": ["--all-evals"],
            "evals-only": ["--evals-only"]}
FIXED_ENV = {"GIT_AUTHOR_NAME": "recorder", "GIT_AUTHOR_EMAIL": "recorder@localhost",
             "GIT_COMMITTER_NAME": "recorder", "GIT_COMMITTER_EMAIL": "recorder@localhost",
             "GIT_AUTHOR_DATE": "2026-08-22T12:00:00Z",
             "GIT_COMMITTER_DATE": "2026-08-22T12:00:00Z"}


def git(repo: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         env={**os.environ, **FIXED_ENV})
    if check and out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def show(repo: Path, ref: str, path: str) -> bytes:
    out = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True)
    return out.stdout if out.returncode == 0 else b""


class Blobs:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, raw: bytes | str) -> str:
        raw = raw.encode() if isinstance(raw, str) else raw
        name = hashlib.sha256(raw).hexdigest()
        self.data[name] = raw
        return name


def blocks(text: str) -> dict[str, str]:
    """Top-level key -> its text (the key line up to the next top-level key line)."""
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines(keepends=True):
        m = re.match(r"([^\s#][^:]*):", line)
        if m:
            key = m.group(1)
            out[key] = ""
        if key is not None:
            out[key] += line
    return out


def added_entries(repo: Path, base: str, head: str) -> list:
    diff = git(repo, "diff", base, head, "--", CHANGELOG)
    text = "\n".join(line[1:] for line in diff.split("\n")
                     if line.startswith("+") and not line.startswith("+++"))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    return data if isinstance(data, list) else []


def named_keys(entries: list, available: list[str]) -> set[str]:
    keys: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        for pattern in entry.get("config-keys") or []:
            rx = re.compile(".*".join(re.escape(p) for p in str(pattern).split("*")))
            keys.update(k for k in available if rx.fullmatch(k))
    return keys


def reduced(texts: dict[str, str], keep: set[str]) -> dict[str, str]:
    out = {}
    for path, text in texts.items():
        parts = blocks(text)
        first = next(iter(parts), None)
        out[path] = "".join(body for k, body in parts.items() if k in keep or k == first)
    return out


def run(cwd: Path, python: str, argv: list[str]) -> dict:
    env = {**os.environ, "PATH": f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run([python, *argv], cwd=cwd, capture_output=True, env=env)
    return {"rc": out.returncode, "stdout": out.stdout, "stderr": out.stderr}


def record_case(repo: Path, python: str, base: str, head: str, blobs: Blobs) -> dict:
    git(repo, "checkout", "-q", "--detach", head)
    refs = ["--changelog-file", CHANGELOG, "--base-ref", base, "--head-ref", head]
    runs = {"gate": run(repo, python, ["utils/validate_perf_changelog.py", *refs])}
    for name, flags in VARIANTS.items():
        runs[name] = run(repo, python, ["utils/process_changelog.py", *refs, *flags])
    head_texts = {p: show(repo, head, p).decode() for p in MASTERS}
    base_texts = {p: show(repo, base, p).decode() for p in MASTERS}
    available = [k for t in head_texts.values() for k in blocks(t)]
    keep = named_keys(added_entries(repo, base, head), available)
    head_blocks = {k: v for t in head_texts.values() for k, v in blocks(t).items()}
    base_blocks = {k: v for t in base_texts.values() for k, v in blocks(t).items()}
    keep |= {k for k in head_blocks.keys() | base_blocks.keys()
             if head_blocks.get(k) != base_blocks.get(k)}
    inputs = {
        "base-changelog": blobs.put(show(repo, base, CHANGELOG)),
        "head-changelog": blobs.put(show(repo, head, CHANGELOG)),
        "head-configs": [blobs.put(t) for t in reduced(head_texts, keep).values()],
        "base-configs": [blobs.put(t) for t in reduced(base_texts, keep).values()],
        "head-runners": blobs.put(show(repo, head, RUNNERS)),
        "base-runners": blobs.put(show(repo, base, RUNNERS)),
    }
    return {"base-ref": base, "head-ref": head, "inputs": inputs, "kept-keys": sorted(keep),
            "runs": {name: {"rc": r["rc"], "stdout": blobs.put(r["stdout"]),
                            "stderr": blobs.put(r["stderr"])} for name, r in runs.items()}}


def crafted_commit(repo: Path, rev: str, case: dict) -> str:
    """Commit `case`'s edits on top of `rev` (fixed author and dates: a stable SHA)."""
    git(repo, "checkout", "-q", "--detach", rev)
    for edit in case["edits"]:
        path = repo / edit["file"]
        text = path.read_bytes().decode()
        if "append" in edit:
            text += edit["append"]
        if "replace" in edit:
            old, new = edit["replace"]
            assert text.count(old) == 1, f"{case['name']}: {old!r} occurs {text.count(old)} times"
            text = text.replace(old, new)
        path.write_bytes(text.encode())
    git(repo, "commit", "-q", "-a", "-m", f"crafted: {case['name']}")
    return git(repo, "rev-parse", "HEAD").strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo", type=Path, help="an InferenceX git repository (bare or not)")
    ap.add_argument("python", help="a Python with pydantic and PyYAML")
    ap.add_argument("--rev", default="843c6254f")
    ap.add_argument("--count", type=int, default=40)
    args = ap.parse_args()
    blobs = Blobs()
    crafted = json.loads((HERE / "crafted.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "ix"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(args.repo),
                        str(repo)], check=True)
        git(repo, "sparse-checkout", "set", "--no-cone", "/utils/", "/configs/", f"/{CHANGELOG}")
        rev = git(repo, "rev-parse", args.rev).strip()
        commits = git(repo, "log", "--format=%H", f"-{args.count}", rev, "--", CHANGELOG).split()
        cases = {}
        for sha in commits:
            parent = git(repo, "rev-parse", f"{sha}^").strip()
            cases[sha[:9]] = {"kind": "commit", **record_case(repo, args.python, parent, sha,
                                                                blobs)}
            print(sha[:9], {k: v["rc"] for k, v in cases[sha[:9]]["runs"].items()}, flush=True)
        for case in crafted:
            head = crafted_commit(repo, rev, case)
            cases[case["name"]] = {"kind": "crafted", "what": case["what"],
                                   **record_case(repo, args.python, rev, head, blobs)}
            print(case["name"], {k: v["rc"] for k, v in cases[case["name"]]["runs"].items()},
                  flush=True)
    version = subprocess.run([args.python, "-c", "import sys, pydantic, yaml; print(sys.version"
                              ".split()[0], pydantic.VERSION, yaml.__version__)"],
                             capture_output=True, text=True).stdout.split()
    manifest = {"inferencex": rev, "python": version[0], "pydantic": version[1],
                "pyyaml": version[2], "cases": cases}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=9) as tar:
        for name, raw in [("manifest.json", json.dumps(manifest, indent=1).encode()),
                          *((f"blobs/{k}", v) for k, v in sorted(blobs.data.items()))]:
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    (HERE / "golden.tar.xz").write_bytes(buf.getvalue())
    summary = {name: {"gate": c["runs"]["gate"]["rc"],
                      **{v: c["runs"][v]["rc"] for v in VARIANTS},
                      "gate-stderr": blobs.data[c["runs"]["gate"]["stderr"]].decode()
                      .strip().splitlines()[-1:]} for name, c in cases.items()}
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases, golden.tar.xz {len(buf.getvalue()) / 1e6:.2f} MB",
          file=sys.stderr)


if __name__ == "__main__":
    main()
