"""`kvbench recipe mirror` against upstream: tests/data/inferencex_mirror/ holds what
InferenceX's own generator (its validation), matrix tests, changelog gate and the launcher
oracle's recorder said about the mirrored seed-000 key, beside seed 000's own pull request
(benchmarks/inferencex_export/record_mirror.py, run on a real InferenceX checkout), and the
mirror's config and changelog output they accepted. The launcher edit is checked here on a
stand-in launcher (fixtures/launcher.py): InferenceX's launchers stay upstream, so the
golden launcher output is the branch mirror writes (stand-in-launcher.diff)."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.inferencex import INFERENCEX
from fixtures.launcher import STAND_IN, install_stand_in

from kvbench.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "inferencex_mirror"
VERDICTS = json.loads((GOLDEN / "verdicts.json").read_text())
KEY = VERDICTS["config_key"]
LAUNCHER = "benchmarks/single_node/agentic/qwen3.5_fp4_mi355x_sglang_mtp.sh"


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("ix")
    (repo / "configs").mkdir()
    for name in ("amd-master.yaml", "nvidia-master.yaml", "runners.yaml"):
        shutil.copyfile(INFERENCEX / name, repo / "configs" / name)
    shutil.copyfile(INFERENCEX / "perf-changelog.yaml", repo / "perf-changelog.yaml")
    install_stand_in(repo)
    cwd = Path.cwd()
    os.chdir(repo)
    try:
        main(["recipe", "mirror", "--config-keys", KEY, "--backend", "hicache"])
    finally:
        os.chdir(cwd)
    return repo


def _launcher(repo: Path) -> str:
    return (repo / LAUNCHER).read_text()


def test_upstream_accepted_the_mirrored_key():
    v = VERDICTS
    assert v["mirror"]["rc"] == 0
    assert v["generator"] == {"rows": 32, "hicache_rows": 16, "rows_equal_seed": True}
    assert v["matrix_tests"]["rc"] == 0 and "passed" in v["matrix_tests"]["summary"][0]
    assert v["changelog_gate"]["rc"] == 0
    oracle = v["launcher_oracle"]
    assert oracle["hicache_rows"] == 16 and oracle["all_reached_replay"]
    assert oracle["servers_equal_seed"] and oracle["differences"] == []
    assert v["image_patch"]["same_file_as_seed"] and v["image_patch"]["changed_the_file"]


def test_mirror_writes_what_upstream_accepted(mirrored):
    master = (mirrored / "configs" / "amd-master.yaml").read_text()
    diff = "".join(difflib.unified_diff(
        (INFERENCEX / "amd-master.yaml").read_text().splitlines(keepends=True),
        master.splitlines(keepends=True), "a/configs/amd-master.yaml",
        "b/configs/amd-master.yaml"))
    assert diff == (GOLDEN / "amd-master.yaml.diff").read_text()
    branch = "".join(difflib.unified_diff(
        STAND_IN.splitlines(keepends=True), _launcher(mirrored).splitlines(keepends=True),
        "a/" + LAUNCHER, "b/" + LAUNCHER))
    assert branch == (GOLDEN / "stand-in-launcher.diff").read_text()
    log = (mirrored / "perf-changelog.yaml").read_text()
    base = (INFERENCEX / "perf-changelog.yaml").read_text()
    assert log[len(base):] == (GOLDEN / "changelog-entry.yaml").read_text()


def _run_patch(script: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-"], input=script, text=True, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=30)


def test_the_branch_patch_applies_once_as_seed_000s_did(mirrored, tmp_path):
    launcher = _launcher(mirrored)
    start = launcher.index("<<'KVBENCH_PATCH'\n") + len("<<'KVBENCH_PATCH'\n")
    script = launcher[start:launcher.index("\nKVBENCH_PATCH\n")]
    target = tmp_path / "sglang" / "srt" / "configs" / "model_config.py"
    target.parent.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    excerpt = (DATA / "sglang" / "model_config-0.5.16.excerpt.txt").read_text()
    target.write_text(excerpt)
    first = _run_patch(script, tmp_path)
    assert first.returncode == 0 and "sglang-34560 applied" in first.stdout
    assert target.read_text() == (GOLDEN / "model_config-0.5.16.excerpt.seed-patched.txt"
                                  ).read_text()
    second = _run_patch(script, tmp_path)
    assert second.returncode == 0 and "already applied" in second.stdout
    target.write_text(excerpt.replace('"Qwen3_5ForCausalLMMTP"', '"Renamed"'))
    moved = _run_patch(script, tmp_path)
    assert moved.returncode == 1 and "expected its anchor once" in moved.stderr


def test_launcher_arithmetic_is_the_launcher_sizing_rule(mirrored):
    """The branch's bash arithmetic and plan/data/launcher_sizing.yaml's rule for it (what
    `--sizing launcher` runs) give the same --hicache-size."""
    from kvbench.plan.launcher_sizing import launcher_size

    launcher = _launcher(mirrored)
    start = launcher.index("    HICACHE_ALIGNMENT_RESERVE_GB=")
    block = launcher[start:launcher.index('    HICACHE_SIZE_GB="${HICACHE_SIZE_GB:-')]
    for total in (97, 599, 1100, 2300):
        for tp in (1, 2, 4, 8):
            run = subprocess.run(["bash", "-c", f"TOTAL_CPU_DRAM_GB={total}; TP={tp}\n{block}"
                                  "echo $MAX_HICACHE_SIZE_GB"], capture_output=True, text=True)
            facts = {"engine": "sglang", "model_prefix": "qwen3.5", "hardware": "mi355x",
                     "offload": "hicache", "tp": tp, "conc": 4}
            names = {"total_cpu_dram_gb": total, "tp": tp, "ep": 1, "pcp": 1, "conc": 4,
                     "dp_attn": False}
            want = launcher_size(facts, names)
            assert int(run.stdout.split()[-1]) == want.value, (total, tp)
