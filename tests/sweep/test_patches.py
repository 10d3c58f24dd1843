"""A recipe's `patches:` end to end: validated, scoped to arms by the matrix, applied at
server start by a real sweep job on the embedded engine, recorded in command.json and
result.json; a moved anchor stops `kvbench launch` with exit 2."""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kvbench.cli import main
from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.sweep import build_specs, run_local
from kvbench.sweep.quickstart import RECIPE, quickstart_options

EXCERPT = REPO / "tests" / "data" / "sglang" / "model_config-0.5.16.excerpt.txt"
PACKAGE = "kvbench_fixture_engine"  # stands in for the engine package on sys.path
TARGET = f"{PACKAGE}/srt/configs/model_config.py"
PATCH = {
    "id": "sglang-34560",
    "file": TARGET,
    "anchor": 'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"\n'
              "self.hf_config.num_nextn_predict_layers = 1\n",
    "replacement": 'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"\n'
                   "self.hf_config.num_nextn_predict_layers = 1\n"
                   "self.hf_text_config.num_nextn_predict_layers = 1\n",
    "arms": ["hicache"],
    "source": "https://github.com/sgl-project/sglang/pull/34560",
}


@pytest.fixture
def engine(tmp_path, monkeypatch) -> Path:
    """An importable engine package holding the real sglang 0.5.16 source excerpt."""
    site = tmp_path / "site"
    target = site / TARGET
    target.parent.mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("")
    shutil.copyfile(EXCERPT, target)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield target
    sys.modules.pop(PACKAGE, None)


@pytest.fixture
def recipe(tmp_path) -> Path:
    data = yaml.safe_load(RECIPE.read_text())
    (entry,) = data.values()
    entry["patches"] = [PATCH]
    path = tmp_path / "recipes" / "patched.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copyfile(RECIPE.parent / "runners.yaml", path.parent / "runners.yaml")
    return path


def test_validate_and_matrix_scope_patches_to_their_arms(recipe, capsys):
    main(["validate", str(recipe)])
    assert "1 config keys valid" in capsys.readouterr().out
    jobs = select_jobs(Selection(config_files=(recipe,)))
    by_arm = {(j.row["kv-offloading"], "patches" in j.row) for j in jobs}
    assert by_arm == {("none", False), ("dram", True)}
    assert [p["id"] for j in jobs if "patches" in j.row for p in j.row["patches"]] == \
        ["sglang-34560"] * 3


def test_bad_patch_is_a_validation_error(recipe, capsys):
    data = yaml.safe_load(recipe.read_text())
    next(iter(data.values()))["patches"][0]["arms"] = ["hicahe"]
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SystemExit) as e:
        main(["validate", str(recipe)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "patches" in err and "'hicahe'" in err and "allowed: all, resident" in err


@pytest.mark.slow
def test_sweep_job_applies_and_records_the_patch(recipe, engine, tmp_path):
    jobs = [j for j in select_jobs(Selection(config_files=(recipe,), min_conc=3, max_conc=3))
            if j.row["kv-offloading"] == "dram"]
    options = quickstart_options(100.0).model_copy(update={"max_requests": 4})
    specs = build_specs(jobs, options, runner_config=recipe.parent / "runners.yaml")
    (outcome,) = run_local(specs, tmp_path / "results")
    assert outcome.status == "ok", outcome
    job_dir = tmp_path / "results" / specs[0].dir_name
    command = read_json(job_dir / "command.json")
    assert [(p["id"], p["status"], p["file"], p["line"]) for p in command["patches"]] == \
        [("sglang-34560", "applied", str(engine), 102)]
    result = read_json(job_dir / "result.json")
    assert [(p["id"], p["status"]) for p in result["engine_patches"]] == \
        [("sglang-34560", "applied")]
    assert "self.hf_text_config.num_nextn_predict_layers = 1" in engine.read_text()
    # the same job again: the patch is found applied and left alone
    again = run_local(specs, tmp_path / "again")
    assert again[0].status == "ok"
    again_cmd = read_json(tmp_path / "again" / specs[0].dir_name / "command.json")
    assert [p["status"] for p in again_cmd["patches"]] == ["already-applied"]


def test_launch_stops_with_exit_2_when_the_anchor_moved(recipe, engine, tmp_path, capsys):
    engine.write_text(engine.read_text().replace(
        'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"',
        'self.hf_config.architectures = ["Qwen3_5ForCausalLMMTP"]'))
    with pytest.raises(SystemExit) as e:
        main(["launch", "--config-files", str(recipe), "--exp-name",
              "qwen3-32b_tp1_conc3_kvdram-hicache", "--work-dir", str(tmp_path / "w"),
              "--ready-timeout", "300"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "patch sglang-34560: anchor" in err and str(engine) in err
    assert "the engine source moved" in err
