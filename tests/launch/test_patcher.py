"""Engine-image patches on real sglang source: the Qwen3.5 MTP draft fix (sgl-project/sglang
#34560) the seed recipes patched into v0.5.16 images, applied to that version's real code
(tests/data/sglang) and checked against the installed sglang, which ships the fix."""

from __future__ import annotations

import ast
import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kvbench.errors import PatchError
from kvbench.launch.patcher import apply_patch, apply_patches
from kvbench.recipe.patches import EnginePatch

EXCERPT = REPO / "tests" / "data" / "sglang" / "model_config-0.5.16.excerpt.txt"
TARGET = "sglang/srt/configs/model_config.py"

# As a recipe writes it (dedented; the patcher finds it at the code's indentation).
PATCH_YAML = """
id: sglang-34560
file: sglang/srt/configs/model_config.py
anchor: |
  self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"
  self.hf_config.num_nextn_predict_layers = 1
replacement: |
  self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"
  self.hf_config.num_nextn_predict_layers = 1
  self.hf_text_config.num_nextn_predict_layers = 1
arms: [hicache]
source: https://github.com/sgl-project/sglang/pull/34560
"""
PATCH = EnginePatch.model_validate(yaml.safe_load(PATCH_YAML)).model_dump(
    by_alias=True, exclude_none=True)


def engine_root(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / "site" / TARGET
    target.parent.mkdir(parents=True)
    shutil.copyfile(source, target)
    target.chmod(0o644)
    return tmp_path / "site"


def installed_sglang_file() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("sglang is not installed: run .ci/install")
    return Path(spec.submodule_search_locations[0]) / "srt" / "configs" / "model_config.py"


def test_applies_once_on_the_buggy_release(tmp_path):
    root = engine_root(tmp_path, EXCERPT)
    before = (root / TARGET).read_text().split("\n")
    outcome = apply_patch(PATCH, root)
    assert outcome["status"] == "applied"
    assert outcome["line"] == 102  # the anchor's first line in the excerpt
    after = (root / TARGET).read_text().split("\n")
    assert after[101:105] == [
        "            # kvbench patch sglang-34560: https://github.com/sgl-project/sglang/pull/34560",
        '            self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"',
        "            self.hf_config.num_nextn_predict_layers = 1",
        "            self.hf_text_config.num_nextn_predict_layers = 1",
    ]
    # two lines added (the marker and the fix), nothing else touched; still valid Python
    assert after[:101] == before[:101] and after[105:] == before[103:]
    ast.parse("\n".join(after))
    assert (root / TARGET).stat().st_mode & 0o777 == 0o644


def test_reapplying_is_a_no_op(tmp_path):
    root = engine_root(tmp_path, EXCERPT)
    apply_patch(PATCH, root)
    once = (root / TARGET).read_bytes()
    assert apply_patch(PATCH, root)["status"] == "already-applied"
    assert (root / TARGET).read_bytes() == once


def test_upstream_fix_in_the_installed_sglang_is_a_no_op(tmp_path):
    real = installed_sglang_file()
    root = engine_root(tmp_path, real)
    outcome = apply_patch(PATCH, root)
    assert outcome["status"] == "upstream-fixed"
    assert (root / TARGET).read_bytes() == real.read_bytes()
    lines = real.read_text().split("\n")
    assert lines[outcome["line"] + 1].strip() == \
        "self.hf_text_config.num_nextn_predict_layers = 1"


def test_moved_anchor_fails_naming_file_and_anchor(tmp_path):
    root = engine_root(tmp_path, EXCERPT)
    path = root / TARGET
    # the refactor a newer release might make: the assignment now goes through a helper
    path.write_text(path.read_text().replace(
        "            self.hf_config.num_nextn_predict_layers = 1\n",
        "            self._set_nextn(1)\n"))
    before = path.read_bytes()
    with pytest.raises(PatchError) as e:
        apply_patch(PATCH, root)
    assert e.value.exit_code == 2
    assert str(path) in e.value.message
    assert "'self.hf_config.architectures[0] = \"Qwen3_5ForCausalLMMTP\"' (2 lines) not " \
           "found" in e.value.message
    assert path.read_bytes() == before


def test_ambiguous_anchor_is_refused(tmp_path):
    root = engine_root(tmp_path, EXCERPT)
    path = root / TARGET
    text = path.read_text()
    path.write_text(text + "\n    def again(self):\n        if True:\n"
                    '            self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"\n'
                    "            self.hf_config.num_nextn_predict_layers = 1\n")
    with pytest.raises(PatchError, match=r"found 2 times \(lines 102, 123\)"):
        apply_patch(PATCH, root)


def test_missing_package_and_file(tmp_path):
    with pytest.raises(PatchError, match="'no_such_engine_pkg' is not importable"):
        apply_patches([{**PATCH, "file": "no_such_engine_pkg/x.py"}])
    with pytest.raises(PatchError, match="cannot read"):
        apply_patch(PATCH, tmp_path)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("file", "/abs/model_config.py", "must be a relative path inside the engine package"),
    ("file", "sglang/srt/x.json", "must be a Python source file"),
    ("arms", ["hicach"], "are not arms (allowed: all, resident, hicache"),
])
def test_schema_rejects_bad_patches(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EnginePatch.model_validate({**yaml.safe_load(PATCH_YAML), field: value})
