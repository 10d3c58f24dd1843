"""A fixed-seq-len Dynamo row's srt-slurm recipe is found where InferenceX's runner finds it:
the checkout's copy, else the srt-slurm clone its runner script checks out for the row
(engines/data/srt_slurm_sources.yaml); never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, INFERENCEX, RUNNERS

from kvbench.engines.srt_recipe import Recipe, load_recipe
from kvbench.engines.srt_source import source_for, sources
from kvbench.recipe import load_runners
from kvbench.recipe.layout import MULTI_NODE_RECIPES

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parents[2]
H100 = "dsr1-fp8-h100-dynamo-sglang"  # both recipes live only in NVIDIA/srt-slurm


def _row(**fields) -> dict:
    return {"framework": "dynamo-trt", "model-prefix": "dsr1", "precision": "fp4",
            "spec-decoding": "mtp", "runner": "b200-multinode", **fields}


@pytest.fixture(scope="module")
def runners():
    return load_runners(RUNNERS)


@pytest.mark.parametrize(("row", "config_file", "want"), [
    (_row(), "recipes/trtllm/b200-fp4/8k1k/mtp/x.yaml",
     ("NVIDIA/srt-slurm", "sa-submission-q2-2026", "b200-dgxc-slurm", 218)),
    (_row(framework="dynamo-sglang"), "recipes/b200-fp4/8k1k.yaml",
     ("NVIDIA/srt-slurm", "a98738de9b2233459b5456e9ed71af09ce893f92", "b200-dgxc-slurm", 201)),
    (_row(runner="gb200"), "recipes/trtllm/gb200-fp4/8k1k/mtp/x.yaml",
     ("cquil11/srt-slurm-nv", "cam/sa-submission-q2-2026", "gb200-nv", 548)),
    (_row(framework="dynamo-vllm", **{"model-prefix": "minimaxm3"}, runner="b300"),
     "recipes/vllm/minimax-m3/b300-fp4/8k1k/mtp/a.yaml",
     ("NVIDIA/srt-slurm", "c1b6b5c97f323baefad577d70c4e8392b6f537d9", "b300-nv", 88)),
    (_row(framework="dynamo-vllm", **{"model-prefix": "minimaxm3"}, runner="b300"),
     "recipes/vllm/minimax-m3/b300-fp4/8k1k/a-tp1-b.yaml",
     ("NVIDIA/srt-slurm", "c1fb6989fc5aca803b4ca0f2d17d8be85fad9732", "b300-nv", 94)),
    # a label runners.yaml does not list is the runner's own name
    (_row(runner="gb300-nv", precision="fp8"), "recipes/trtllm/gb300-fp8/x.yaml",
     ("NVIDIA/srt-slurm", "sa-submission-q2-2026", "gb300-nv", 418)),
])
def test_the_runner_scripts_clone_per_row(runners, row, config_file, want):
    source = source_for(row, config_file, runners)
    assert (source.repo, source.ref, source.script, source.line) == want


def test_no_source_for_agentic_or_amd_rows(runners):
    assert source_for(_row(**{"scenario-type": "agentic-coding"}), "recipes/x.yaml",
                      runners) is None
    assert source_for(_row(runner="mi355x-disagg"), "recipes/x.yaml", runners) is None


def test_every_rule_is_well_formed():
    for script, rules in sources().scripts.items():
        assert rules[-1].when == {}, f"{script}: the chain ends with its else branch"
        assert all(set(r.when) <= {"framework", "model-prefix", "precision", "spec-decoding",
                                   "config-file"} for r in rules)


def _clone(tmp_path: Path) -> Path:
    """A git repository standing for NVIDIA/srt-slurm: the two H100 recipes, copied from it,
    on its branch sa-submission-q2-2026 (tests/data/srt-slurm/README.md)."""
    repo = tmp_path / "srt-slurm"
    shutil.copytree(DATA / "srt-slurm" / "sa-submission-q2-2026", repo)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                        *args], check=True, capture_output=True)

    git("init", "-q", "-b", "sa-submission-q2-2026")
    git("remote", "add", "origin", "https://github.com/NVIDIA/srt-slurm.git")
    git("add", "-A")
    git("commit", "-qm", "recipes")
    git("checkout", "-q", "-b", "main")
    git("rm", "-rq", "recipes")
    git("commit", "-qm", "main has moved on")
    return repo


def _launch(key: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--config-files",
            *map(str, CONFIGS), "--runner-config", str(RUNNERS), "--config-keys", key,
            "--scenario-type", "fixed-seq-len"]
    return subprocess.run(argv, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin",
                               "COLUMNS": "200", **env})


@pytest.mark.slow
def test_launch_reads_the_recipes_from_the_clone_at_the_runners_ref(tmp_path):
    out = _launch(H100, {"KVBENCH_SRT_SLURM": str(_clone(tmp_path))})
    assert out.returncode == 0, out.stderr
    assert "2 jobs, 0 skipped" in out.stdout and "python3 -m dynamo.frontend" in out.stdout


def test_without_a_clone_the_refusal_names_what_to_fetch(tmp_path):
    out = _launch(H100, {"KVBENCH_SRT_SLURM": str(tmp_path)})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert ("InferenceX's runner reads it from its srt-slurm clone, "
            "NVIDIA/srt-slurm@sa-submission-q2-2026 (InferenceX 843c6254f "
            "runners/launch_h100-dgxc-slurm.sh:52)") in " ".join(out.stderr.split())


def test_recipes_without_backend_type_or_with_newer_fields_load():
    """srtctl defaults a backend without `type` to SGLang (the dsr1 B200 SGLang MTP recipes
    once raised KeyError: 'type'), and its SrtConfig has `profiling` (the Qwen3.5 GB300 TRT
    recipes were refused)."""
    base = INFERENCEX / MULTI_NODE_RECIPES
    sglang = load_recipe(base / "sglang/dsr1/b200-fp4/8k1k/disagg/mtp/8k1k_mtp_lowlat_0.yaml",
                         None, "recipes/sglang/dsr1/b200-fp4/8k1k/disagg/mtp/8k1k_mtp_lowlat_0")
    assert isinstance(sglang, Recipe) and sglang.backend_type == "sglang"
    trt = load_recipe(base / "trtllm/qwen3.5/gb300-fp4/disagg/8k1k/stp/"
                             "ctx1dep2_gen13tp4_mtp0_c78.yaml", None, "qwen3.5 trt")
    assert trt.backend_type == "trtllm" and trt.profiling
