"""`--emit github-matrix` within GitHub Actions' documented limits (sweep/emit.py): at most 256
jobs per matrix, at most 1 MB of outputs per job (counted in UTF-16), every path relative to
the checkout, so an entry runs on a runner whose checkout lives elsewhere (issue 39 item 6:
the catalog gave one matrix of 746 entries, 1.2 MB, with the planning machine's paths)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from kvbench.cli import main
from kvbench.sweep.emit import MAX_MATRIX_JOBS, MAX_OUTPUT_BYTES, utf16_bytes
from kvbench.sweep.spec import JobSpec

CATALOG = REPO / "tests" / "data" / "inferencex"


def _checkout(root, *files):
    root.mkdir(parents=True)
    for f in files:
        shutil.copy(f, root / f.name)
    return root


def test_the_catalog_is_split_into_matrices_within_githubs_limits(tmp_path, capsys,
                                                                 monkeypatch):
    checkout = _checkout(tmp_path / "ix", CATALOG / "nvidia-master.yaml",
                         CATALOG / "amd-master.yaml", CATALOG / "runners.yaml")
    monkeypatch.chdir(checkout)
    argv = ["run", "--config-files", "nvidia-master.yaml", "--config-files", "amd-master.yaml",
            "--runner-config", "runners.yaml", "--emit", "github-matrix"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: the matrix has 746 jobs"), err
    assert "--emit-dir DIR" in err and "Traceback" not in err

    main([*argv, "--emit-dir", "jobs"])
    lines = capsys.readouterr().out.splitlines()
    # what a workflow step appends to $GITHUB_OUTPUT: one output per line
    outputs = dict(line.split("=", 1) for line in lines)
    count = int(outputs.pop("matrix_count"))
    assert sorted(outputs) == [f"matrix_{i}" for i in range(count)] and count == 3
    assert utf16_bytes("\n".join(lines)) <= MAX_OUTPUT_BYTES  # all of the job's outputs
    entries = [e for m in outputs.values() for e in json.loads(m)["include"]]
    assert all(len(json.loads(m)["include"]) <= MAX_MATRIX_JOBS for m in outputs.values())
    assert len(entries) == len({e["name"] for e in entries}) == 746
    for entry in entries[::50]:
        spec = JobSpec.read(checkout / entry["job-file"])
        assert entry["job-file"] == f"jobs/{entry['name']}.json"
        assert spec.fingerprint == entry["fingerprint"] and spec.dir_name == entry["name"]
        assert spec.runner_config == "runners.yaml"
        assert spec.config_file in ("nvidia-master.yaml", "amd-master.yaml")


def test_an_entry_runs_from_another_checkout(tmp_path):
    """The plan job's checkout and the bench job's are different directories: the job file
    names its recipe and runners relative to the checkout, so it runs from the other one."""
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": os.environ["PATH"]}
    planner = _checkout(tmp_path / "plan" / "examples", REPO / "examples" / "quickstart.yaml",
                        REPO / "examples" / "runners.yaml").parent
    emitted = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", "examples/quickstart.yaml", "--max-conc", "3",
         "--max-requests", "3", "--emit", "github-matrix", "--emit-dir", "jobs"],
        capture_output=True, text=True, cwd=planner, env=env, timeout=120)
    assert emitted.returncode == 0, emitted.stderr
    [line] = [x for x in emitted.stdout.splitlines() if x.startswith("matrix_0=")]
    entry = json.loads(line.split("=", 1)[1])["include"][1]
    bench = tmp_path / "runner" / "work"  # the artifact and the checkout, elsewhere
    shutil.copytree(planner, bench)
    ran = subprocess.run([sys.executable, "-m", "kvbench", "run-job", "--job-file",
                          entry["job-file"], "--results", "results"], capture_output=True,
                         text=True, cwd=bench, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.startswith(f"{entry['name']}: ok")
    result = json.loads((bench / "results" / entry["name"] / "result.json").read_text())
    assert result["fingerprint"] == entry["fingerprint"] and result["status"] == "ok"


def test_a_file_outside_the_checkout_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", str(REPO / "examples" / "quickstart.yaml"), "--emit", "github-matrix"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "is outside the checkout" in err, err


def test_plan_takes_emit_only_with_predict(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--config-files", str(REPO / "examples" / "quickstart.yaml"),
              "--emit", "github-matrix"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: --emit goes with --predict"), err
    with pytest.raises(SystemExit) as e:
        main(["run", str(REPO / "examples" / "quickstart.yaml"), "--emit-dir", "x"])
    assert e.value.code == 2
    assert "--emit-dir goes with --emit github-matrix" in capsys.readouterr().err
