"""Every job directory is inside --results: recipe text that becomes a path part (the
model-prefix in the exp-name) is sanitised, a job file cannot aim elsewhere, and resume's
clean-up never deletes outside the results directory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from kvbench.errors import SweepError
from kvbench.files import inside, path_part
from kvbench.matrix import Job
from kvbench.sweep import JobSpec, RunOptions, build_specs, run_job

ROW = {"exp-name": "qwen3-8b_tp1_conc2_kvnone", "framework": "sim", "model": "Qwen/Qwen3-8B",
       "runner": "cluster:h100-sim", "tp": 1, "pp": 1, "pcp-size": 1, "conc": 2,
       "kv-offloading": "none", "duration": 3600}


@pytest.mark.parametrize("name,expected", [
    ("../../etc/passwd_tp1", "_.._etc_passwd_tp1"),
    ("/abs/path", "_abs_path"),
    ("..", "job"),
    (".hidden", "hidden"),
    ("a b;rm -rf ~", "a_b_rm_-rf_"),
    ("qwen3.5_tp2_conc32_kvdram-hicache_spec-mtp", "qwen3.5_tp2_conc32_kvdram-hicache_spec-mtp"),
])
def test_path_part(name, expected):
    assert path_part(name) == expected


def test_long_names_are_cut_and_stay_distinct():
    a, b = path_part("x" * 300 + "a"), path_part("x" * 300 + "b")
    assert len(a) == len(b) == 200 and a != b


def test_a_hostile_model_prefix_stays_inside_results(tmp_path):
    recipe = (REPO / "examples" / "quickstart.yaml").read_text().replace(
        "model-prefix: qwen3-32b", "model-prefix: ../../../escaped")
    (tmp_path / "r").mkdir()
    path = tmp_path / "r" / "hostile.yaml"
    path.write_text(recipe)
    (tmp_path / "r" / "runners.yaml").write_text((REPO / "examples" / "runners.yaml").read_text())
    out = subprocess.run([sys.executable, "-m", "kvbench", "run", str(path), "--emit",
                          "github-matrix", "--results", str(tmp_path / "results")],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)["include"]
    dirs = {e["job"]["dir_name"] for e in entries}
    assert dirs and all(d.startswith("_.._.._escaped") and "/" not in d for d in dirs)
    assert all(e["job"]["row"]["exp-name"].startswith("../../../escaped") for e in entries)


def test_a_job_file_cannot_aim_outside_results():
    spec = build_specs([Job(config_key="k", row=ROW, scenario="agentic-coding")],
                       RunOptions())[0]
    doc = {**spec.to_json(), "dir_name": "../outside"}
    with pytest.raises(ValueError, match="is not a plain directory name"):
        JobSpec.model_validate(doc)


def test_resume_never_deletes_through_a_symlinked_job_dir(tmp_path):
    spec = build_specs([Job(config_key="k", row=ROW, scenario="agentic-coding")],
                       RunOptions())[0]
    results, elsewhere = tmp_path / "results", tmp_path / "precious"
    results.mkdir()
    elsewhere.mkdir()
    keep = elsewhere / "result.json"
    keep.write_text("{}")
    (results / spec.dir_name).symlink_to(elsewhere)
    assert not inside(results / spec.dir_name, results)
    with pytest.raises(SweepError, match="is not inside the results directory"):
        run_job(spec, results)
    assert keep.read_text() == "{}"
