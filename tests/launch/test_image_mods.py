"""Image modifications as the launchers make them (plan/data/image.yaml, launch/patcher.py).

The Qwen3.5 H100/H200 launchers' `sed -i` on sglang's multi_tokenizer_mixin.py is run for real
(GNU sed, the argv the launcher oracle recorded) on that function of sglang 0.5.12, which
lacks the field, and kvbench's edit gives the same file; on 0.5.16, which carries it, the
launcher's own range already holds the field and kvbench's edit is upstream-fixed. The other
kinds run their real tools (pip, bash) on small inputs: already-applied, applied, refused by
name, skipped by the user."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from kvbench.errors import PatchError
from kvbench.launch.patcher import MARKER, apply_patches
from kvbench.plan.image import all_mods, dynamo_mods, image_mods, resolved

DATA = REPO / "tests" / "data" / "sglang"
ORACLE = REPO / "tests" / "engines" / "data" / "launcher_oracle"
TARGET = "sglang/srt/managers/multi_tokenizer_mixin.py"
MOD = all_mods()["sglang-batch-str-cached-tokens-details"]


def _recorded_seds() -> list[list[str]]:
    """The `sed` calls the Qwen3.5 H100 launcher made on the image (the oracle's recording)."""
    rec = json.loads((ORACLE / "qwen3.5-fp8-h100-sglang-agentic-mtp.json").read_text())[0]
    return [c["argv"] for c in rec["calls"] if c["kind"] == "container-patch"]


def _site(tmp_path: Path, excerpt: str) -> Path:
    target = tmp_path / "site" / TARGET
    target.parent.mkdir(parents=True)
    shutil.copyfile(DATA / excerpt, target)
    return target


def _sed(argv: list[str], path: Path) -> str:
    """GNU sed with the launcher's recorded arguments, on `path` instead of the image's file."""
    out = subprocess.run(["sed", *argv[1:-1], str(path)], capture_output=True, text=True,
                         check=True)
    return out.stdout


def test_the_launchers_sed_and_kvbenchs_edit_give_the_same_file(tmp_path):
    probe, edit = _recorded_seds()
    assert "-n" in probe and "-i" in edit
    theirs = _site(tmp_path / "a", "multi_tokenizer_mixin-0.5.12.excerpt.txt")
    ours = _site(tmp_path / "b", "multi_tokenizer_mixin-0.5.12.excerpt.txt")
    before = theirs.read_text()
    assert "cached_tokens_details=" not in _sed(probe, theirs)  # the launcher's guard fails
    _sed(edit, theirs)
    assert theirs.read_text() != before
    (outcome,) = apply_patches([MOD], {"sglang": ours.parents[3]})
    assert outcome["status"] == "applied" and outcome["kind"] == "edit"
    lines = ours.read_text().split("\n")
    marker = [line for line in lines if line.strip().startswith(MARKER)]
    assert marker == [f"            {MARKER}{MOD['id']}: {MOD['source']}"]
    assert [line for line in lines if line not in marker] == theirs.read_text().split("\n")
    # idempotent: once more is a no-op
    again = ours.read_bytes()
    assert apply_patches([MOD], {"sglang": ours.parents[3]})[0]["status"] == "already-applied"
    assert ours.read_bytes() == again


def test_on_a_release_that_carries_it_both_leave_the_file(tmp_path):
    probe, _ = _recorded_seds()
    path = _site(tmp_path, "multi_tokenizer_mixin-0.5.16.excerpt.txt")
    before = path.read_bytes()
    # the launcher's range already holds the field, so its guard skips the sed -i
    assert "cached_tokens_details=" in _sed(probe, path)
    (outcome,) = apply_patches([MOD], {"sglang": path.parents[3]})
    assert outcome["status"] == "upstream-fixed"
    assert path.read_bytes() == before


def test_the_edit_is_confined_to_the_launchers_block_and_refuses_a_moved_one(tmp_path):
    """0.5.12's BatchTokenIDOutput branch has the fixed lines already: outside the
    BatchStrOutput block they do not count as the fix; without that block the edit stops."""
    path = _site(tmp_path, "multi_tokenizer_mixin-0.5.12.excerpt.txt")
    text = path.read_text()
    assert text.count("cached_tokens_details=_extract_field_by_index(") == 1
    path.write_text(text.replace("elif isinstance(output, BatchStrOutput):",
                                 "elif isinstance(output, StrOutput):"))
    with pytest.raises(PatchError, match=r"block 'elif isinstance.output, BatchStrOutput.:' "
                                         r"not found .* the engine source moved"):
        apply_patches([MOD], {"sglang": path.parents[3]})


def test_pip_is_applied_when_a_pin_is_missing_and_refused_by_name_when_pip_fails():
    have = importlib.metadata.version("PyYAML")
    present = {"id": "t", "kind": "pip", "source": "t", "packages": [f"PyYAML=={have}"]}
    assert apply_patches([present])[0]["status"] == "already-applied"
    # real pip, offline: a version nobody has is a refusal naming the modification
    missing = {"id": "pin-gone", "kind": "pip", "source": "x.sh:1",
               "packages": ["PyYAML==0.0.1"], "pip-args": ["--no-index", "--quiet"]}
    with pytest.raises(PatchError, match=r"image modification pin-gone \(x.sh:1\): .* exited"):
        apply_patches([missing])
    assert apply_patches([missing], skip=("pin-gone",))[0]["status"] == "skipped-by-user"


def test_a_script_runs_when_it_is_the_pinned_file_and_is_refused_otherwise(tmp_path):
    script = tmp_path / "benchmarks" / "patch.sh"
    script.parent.mkdir()
    script.write_text(f"touch {tmp_path / 'ran'}\n")
    mod = {"id": "s", "kind": "script", "source": "x.sh:9", "path": "benchmarks/patch.sh",
           "sha256": hashlib.sha256(script.read_bytes()).hexdigest()}
    (m,) = resolved([mod], tmp_path)
    assert m["action"] == "apply" and m["script-file"] == str(script)
    assert apply_patches([m])[0]["status"] == "applied" and (tmp_path / "ran").exists()
    script.write_text("echo changed\n")
    assert resolved([mod], tmp_path)[0]["action"].startswith("refuse: ")
    with pytest.raises(PatchError, match=r"not the pinned .* the script moved"):
        apply_patches([m])
    (gone,) = resolved([mod], tmp_path / "elsewhere")
    with pytest.raises(PatchError, match="is not in the row's InferenceX checkout"):
        apply_patches([gone])


def test_a_source_build_is_always_refused_by_name():
    (build,) = dynamo_mods({"hash": "71eb001e17fa73c742f0afe1a6ed96836cb135fd"}, "recipe r")
    assert build["id"] == "dynamo-source-71eb001e17fa" and build["kind"] == "build"
    with pytest.raises(PatchError, match=r"dynamo-source-71eb001e17fa .* kvbench does "
                                         r"not build Dynamo built from source at 71eb001e"):
        apply_patches([build])
    (wheel,) = dynamo_mods({"version": "1.3.1"}, "recipe r")
    assert wheel["packages"] == ["ai-dynamo-runtime==1.3.1", "ai-dynamo==1.3.1"]
    assert dynamo_mods({"version": "1.3.1", "install": False}, "recipe r") == []


def test_apt_is_already_applied_when_the_tool_is_on_path():
    mod = {"id": "a", "kind": "apt", "source": "t", "packages": ["coreutils"],
           "provides": "ls"}
    assert apply_patches([mod])[0]["status"] == "already-applied"


def test_every_modification_names_its_source_and_rows_get_them_by_launcher():
    for mod_id, mod in all_mods().items():
        assert any(w in mod["source"] for w in (".sh:", "srt-slurm", "github.com/")), mod_id
    facts = {"engine": "sglang", "model_prefix": "qwen3.5", "hardware": "h100",
             "spec_decoding": "mtp", "offload": "none"}
    assert [m["id"] for m in image_mods(facts)] == [MOD["id"]]
    assert image_mods({**facts, "spec_decoding": "none"}) == []  # no launcher runs it
    # a multi-node row's workers get their srt-slurm setup script's, never a launcher's
    assert image_mods(facts, multinode=True) == []
    assert [m["id"] for m in image_mods({}, multinode=True,
                                        setup_script="vllm-container-deps.sh")] == \
        ["numactl", "msgpack", "vllm-numa-bind-hash-fix"]


def test_the_cli_patcher_takes_the_skip_list(tmp_path):
    mod = {"id": "b", "kind": "build", "source": "s", "what": "x"}
    out = subprocess.run([sys.executable, "-m", "kvbench.launch.patcher", json.dumps([mod]),
                          json.dumps(["b"])], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["status"] == "skipped-by-user"


def test_srt_slurm_numa_bind_fix_as_its_own_script_made_it(tmp_path):
    """vllm-container-deps.sh's vllm_numa_bind_hash_fix.py, run by the recorder on vLLM
    0.20.0's compute_hash (data/image_mods/): kvbench's edit gives the same method, less the
    script's two comment lines; on the result, and on a vLLM that ships the fix (the
    installed 0.33), it is a no-op."""
    rec = json.loads((REPO / "tests/engines/data/image_mods/vllm-numa-bind-hash-fix.json")
                     .read_text())
    mod = all_mods()["vllm-numa-bind-hash-fix"]
    path = tmp_path / "site" / mod["file"]
    path.parent.mkdir(parents=True)
    path.write_text(rec["before"])
    (outcome,) = apply_patches([mod], {"vllm": tmp_path / "site"})
    assert outcome["status"] == "applied"

    def code(text: str) -> list[str]:
        return [line for line in text.split("\n") if not line.strip().startswith("#")]

    assert code(path.read_text()) == code(rec["after"])
    path.write_text(rec["after"])
    assert apply_patches([mod], {"vllm": tmp_path / "site"})[0]["status"] == "upstream-fixed"
    from kvbench.launch.patcher import package_root  # the installed release's own file

    shutil.copyfile(package_root("vllm") / mod["file"], path)
    installed = apply_patches([mod], {"vllm": tmp_path / "site"})[0]
    assert installed["status"] == "upstream-fixed", installed


def test_launch_shows_the_rows_modifications_and_refuses_one_it_cannot_apply(tmp_path):
    """Kimi-K3 MI355X: the launcher runs apply_k3_container_patches.sh from its checkout; the
    project's config copy has no launchers, so the dry run says it will refuse, and a real
    launch stops naming it before any server starts (exit 2)."""
    from fixtures.inferencex import CONFIGS, RUNNERS

    cmd = [sys.executable, "-m", "kvbench", "launch", "--config-files", *map(str, CONFIGS),
           "--runner-config", str(RUNNERS), "--config-keys",
           "kimik3-fp4-mi355x-vllm-agentic-mtp", "--max-conc", "1"]
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "300"}
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "image mod apply-k3-container-patches: run benchmarks/single_node/agentic/" \
           "apply_k3_container_patches.sh -> refuse:" in " ".join(dry.stdout.split())
    run = subprocess.run([*cmd, "--work-dir", str(tmp_path)], capture_output=True, text=True,
                         env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "image modification apply-k3-container-patches (kimik3_fp4_mi355x_mtp.sh:150" \
        in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "server.log").exists()
    typo = subprocess.run([*cmd, "--skip-image-mod", "apply-k3"], capture_output=True,
                          text=True, env=env)
    assert typo.returncode == 2 and "allowed: apply-k3-container-patches" in typo.stderr
