"""Check `kvbench recipe mirror` against what upstream accepts and what seed 000's pull request
launches, with upstream's own programs, and record the verdicts as golden data.

    python3 benchmarks/inferencex_export/record_mirror.py --git-dir DIR

Two trees of SemiAnalysisAI/InferenceX at 843c6254f (the git dir the search tool's `fetch`
returns), each a fresh git repository with that tree as its base commit:

- `seed`: seed 000's pull request (42692ef77, the Qwen3.5 MI355X HiCache arms) applied on top:
  its launcher and master-config hunks (`patch -p1`; its changelog hunk is compared as text);
- `mirror`: `kvbench recipe mirror --config-keys qwen3.5-fp4-mi355x-sglang-agentic-mtp
  --backend hicache` run at the tree's root, committed.

On `mirror`, unmodified: the generator (`utils/matrix_logic/generate_sweep_configs.py
test-config`, which validates every master config: validation.py, extra='forbid'), the matrix
tests (`pytest utils/matrix_logic`) and the changelog gate CI runs on a pull request
(`utils/validate_perf_changelog.py --base-ref base --head-ref head`, run-sweep.yml:107-124).
Both trees go through the launcher oracle's recorder (benchmarks/launcher_oracle/record.py,
for the key): the HiCache rows must start the same engine with the same argv and environment
and apply one image patch first. The two patch scripts are then run on SGLang 0.5.16's
ModelConfig excerpt (tests/data/sglang/): the files they leave must be equal, and a second run
must change nothing.

Writes tests/data/inferencex_mirror/: verdicts.json, the mirror's output upstream accepted
(`amd-master.yaml.diff`, the launcher, `changelog-entry.yaml`), which the offline test holds
`kvbench recipe mirror` to, and the excerpt as seed 000's own patch script left it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/inferencex_mirror"
BASE = "843c6254ff69b567f772f6a5fd97675af3d04431"
SEED = "42692ef7774a5c874154aab0ad746ff899d6203c"
KEY = "qwen3.5-fp4-mi355x-sglang-agentic-mtp"
LAUNCHER = "benchmarks/single_node/agentic/qwen3.5_fp4_mi355x_sglang_mtp.sh"
EXCERPT = ROOT / "tests/data/sglang/model_config-0.5.16.excerpt.txt"
GIT = ["git", "-c", "user.name=kvbench", "-c", "user.email=kvbench@localhost",
       "-c", "commit.gpgsign=false"]


def _sh(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)


def _tree(git_dir: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    tar = subprocess.run(["git", "--git-dir", str(git_dir), "archive", BASE], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(dest, filter="tar")
    _sh([*GIT, "init", "-q", "-b", "base"], dest, check=True)
    _sh([*GIT, "add", "-A"], dest, check=True)
    _sh([*GIT, "commit", "-qm", "base"], dest, check=True)
    _sh([*GIT, "branch", "-c", "head"], dest, check=True)


def _commit(dest: Path, message: str) -> None:
    _sh([*GIT, "checkout", "-q", "head"], dest, check=True)
    _sh([*GIT, "add", "-A"], dest, check=True)
    _sh([*GIT, "commit", "-qm", message], dest, check=True)


def _apply_rejects(tree: Path) -> list[str]:
    """Hunks `patch` rejected for context the base commit changed since the seed's base (843c's
    launcher has `--kv-cache-dtype fp8_e4m3` after `--page-size 16`): each hunk's removed lines,
    found once in the file, replaced by its added lines."""
    done = []
    for rej in tree.rglob("*.rej"):
        target = rej.with_suffix("")
        text = target.read_text()
        for hunk in rej.read_text().split("\n@@")[1:]:
            body = hunk.split("\n")[1:]
            old = [x[1:] for x in body if x.startswith("-")]
            new = [x[1:] for x in body if x.startswith("+")]
            block = "\n".join(old) + "\n"
            if text.count(block) != 1:
                raise SystemExit(f"{rej}: a rejected hunk's lines are not in {target} once")
            text = text.replace(block, "\n".join(new) + "\n")
            done.append(f"{target.relative_to(tree)}: {' | '.join(old)} -> {' | '.join(new)}")
        target.write_text(text)
        rej.unlink()
    return done


def _rows(tree: Path) -> list[dict]:
    p = _sh([sys.executable, "utils/matrix_logic/generate_sweep_configs.py", "test-config",
             "--config-files", "configs/amd-master.yaml", "configs/nvidia-master.yaml",
             "--runner-config", "configs/runners.yaml", "--scenario-type", "agentic-coding",
             "--no-evals", "--config-keys", KEY], tree)
    if p.returncode:
        raise SystemExit(f"generator failed in {tree}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def _record(tree: Path, out: Path) -> list[dict]:
    _sh([sys.executable, str(ROOT / "benchmarks/launcher_oracle/record.py"), "--checkout",
         str(tree), "--config-keys", KEY, "--out", str(out), "--jobs", "2"], ROOT, check=True)
    return json.loads((out / f"{KEY}.json").read_text())


def _heredoc(text: str, opener: str, end: str) -> str:
    start = text.index(opener)
    body = text[text.index("\n", start) + 1:]
    return body[:body.index(f"\n{end}\n") + 1]


def _run_patches(seed_launcher: str, mirror_launcher: str, work: Path) -> dict:
    """Seed's script takes the file as its argument; kvbench's finds it in the package."""
    seed_script = _heredoc(seed_launcher, "<<'PYPATCH'", "PYPATCH")
    ours = _heredoc(mirror_launcher, "<<'KVBENCH_PATCH'", "KVBENCH_PATCH")
    results = {}
    for name, script in (("seed", seed_script), ("kvbench", ours)):
        pkg = work / name / "sglang"
        (pkg / "srt" / "configs").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        target = pkg / "srt" / "configs" / "model_config.py"
        target.write_text(EXCERPT.read_text())
        env = {**os.environ, "PYTHONPATH": str(work / name)}
        runs = [subprocess.run([sys.executable, "-", str(target)], input=script, text=True,
                               capture_output=True, env=env) for _ in range(2)]
        results[name] = {"rc": [r.returncode for r in runs],
                         "stdout": [r.stdout.strip() for r in runs], "file": target.read_text()}
    return results


def _engine_calls(rec: list[dict]) -> dict[str, dict]:
    out = {}
    for row in rec:
        if row["row"].get("kv-offloading") != "dram":
            continue
        calls = row.get("calls") or []
        servers = [c for c in calls if c["kind"] == "server"]
        patches = [c for c in calls if c["kind"] == "container-patch"]
        out[row["row"]["exp-name"] + f"@tp{row['row']['tp']}"] = {
            "reached-replay": row.get("reached-replay"),
            "server": [{"argv": c["argv"], "env-set": c.get("env-set")} for c in servers],
            "patches-before-server": len(patches)}
    return out


def _first_difference(seed: dict, mirror: dict) -> dict | None:
    for key in sorted(set(seed) | set(mirror)):
        a, b = seed.get(key), mirror.get(key)
        if a == b:
            continue
        if not a or not b:
            return {"row": key, "seed": bool(a), "mirror": bool(b)}
        out: dict = {"row": key, "patches": [a["patches-before-server"],
                                              b["patches-before-server"]]}
        for sa, sb in zip(a["server"], b["server"], strict=False):
            out["argv_only_seed"] = [x for x in sa["argv"] if x not in sb["argv"]]
            out["argv_only_mirror"] = [x for x in sb["argv"] if x not in sa["argv"]]
            out["env_diff"] = {k: [sa["env-set"].get(k), sb["env-set"].get(k)]
                               for k in set(sa["env-set"]) | set(sb["env-set"])
                               if sa["env-set"].get(k) != sb["env-set"].get(k)}
        return out
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", type=Path, required=True)
    args = ap.parse_args()
    verdicts: dict = {"inferencex_commit": BASE, "seed_commit": SEED, "config_key": KEY}
    with tempfile.TemporaryDirectory(prefix="ix-mirror-") as tmp:
        seed, mirror = Path(tmp, "seed"), Path(tmp, "mirror")
        _tree(args.git_dir, seed)
        _tree(args.git_dir, mirror)
        diff = subprocess.run(["git", "--git-dir", str(args.git_dir), "diff", f"{SEED}^", SEED,
                               "--", LAUNCHER, "configs/amd-master.yaml"], check=True,
                              capture_output=True, text=True).stdout
        applied = _sh(["patch", "-p1", "--no-backup-if-mismatch"], seed, input=diff)
        verdicts["seed_applied"] = {"rc": applied.returncode,
                                    "stdout": applied.stdout.strip().splitlines(),
                                    "rejects_applied": _apply_rejects(seed)}
        _commit(seed, "seed 000")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        done = _sh([sys.executable, "-m", "kvbench", "recipe", "mirror", "--config-keys", KEY,
                    "--backend", "hicache"], mirror, env=env)
        verdicts["mirror"] = {"rc": done.returncode, "stderr": done.stderr.strip()[-2000:]}
        _commit(mirror, "kvbench recipe mirror")

        seed_rows, mirror_rows = _rows(seed), _rows(mirror)
        verdicts["generator"] = {
            "rows": len(mirror_rows),
            "hicache_rows": sum(1 for r in mirror_rows if r.get("kv-offloading") == "dram"),
            "rows_equal_seed": seed_rows == mirror_rows}
        tests = _sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "utils/matrix_logic"], mirror)
        verdicts["matrix_tests"] = {"rc": tests.returncode,
                                    "summary": tests.stdout.strip().splitlines()[-1:]}
        gate = _sh([sys.executable, "utils/validate_perf_changelog.py", "--changelog-file",
                    "perf-changelog.yaml", "--base-ref", "base", "--head-ref", "head"], mirror)
        verdicts["changelog_gate"] = {"rc": gate.returncode,
                                      "output": (gate.stdout + gate.stderr).strip()[-2000:]}

        seed_calls = _engine_calls(_record(seed, Path(tmp, "rec-seed")))
        mirror_calls = _engine_calls(_record(mirror, Path(tmp, "rec-mirror")))
        verdicts["launcher_oracle"] = {
            "hicache_rows": len(mirror_calls),
            "all_reached_replay": all(c["reached-replay"] for c in mirror_calls.values()),
            "servers_equal_seed": seed_calls == mirror_calls,
            "differences": sorted(k for k in set(seed_calls) | set(mirror_calls)
                                  if seed_calls.get(k) != mirror_calls.get(k)),
            "example": next(iter(mirror_calls.items()), None),
            "first_difference": _first_difference(seed_calls, mirror_calls)}

        seed_text, mirror_text = (seed / LAUNCHER).read_text(), (mirror / LAUNCHER).read_text()
        patches = _run_patches(seed_text, mirror_text, Path(tmp, "patch"))
        verdicts["image_patch"] = {
            "same_file_as_seed": patches["seed"]["file"] == patches["kvbench"]["file"],
            "changed_the_file": patches["kvbench"]["file"] != EXCERPT.read_text(),
            "kvbench": {k: patches["kvbench"][k] for k in ("rc", "stdout")},
            "seed": {k: patches["seed"][k] for k in ("rc", "stdout")}}

        OUT.mkdir(parents=True, exist_ok=True)
        base_master = _sh(["git", "show", "base:configs/amd-master.yaml"], mirror).stdout
        master = (mirror / "configs/amd-master.yaml").read_text()
        (OUT / "amd-master.yaml.diff").write_text("".join(difflib.unified_diff(
            base_master.splitlines(keepends=True), master.splitlines(keepends=True),
            "a/configs/amd-master.yaml", "b/configs/amd-master.yaml")))
        (OUT / Path(LAUNCHER).name).write_text(mirror_text)
        (OUT / "model_config-0.5.16.excerpt.seed-patched.txt").write_text(
            patches["seed"]["file"])
        base_log = _sh(["git", "show", "base:perf-changelog.yaml"], mirror).stdout
        (OUT / "changelog-entry.yaml").write_text(
            (mirror / "perf-changelog.yaml").read_text()[len(base_log):])
    (OUT / "verdicts.json").write_text(json.dumps(verdicts, indent=1) + "\n")
    print(json.dumps({k: v for k, v in verdicts.items() if k != "launcher_oracle"}, indent=1)
          [:4000])
    print(json.dumps(verdicts["launcher_oracle"], indent=1)[:3000])
    ok = (verdicts["mirror"]["rc"] == 0 and verdicts["matrix_tests"]["rc"] == 0
          and verdicts["changelog_gate"]["rc"] == 0
          and verdicts["launcher_oracle"]["servers_equal_seed"]
          and verdicts["image_patch"]["same_file_as_seed"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
