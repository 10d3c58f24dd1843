"""`kvbench validate` and `kvbench matrix` end to end through the CLI boundary."""

from __future__ import annotations

import json

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.recipes import MULTI, SINGLE, valid_recipe, valid_runners, write_recipe

from kvbench.cli import main
from kvbench.cli.selection import spread_multi_values


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    # rich wraps at the terminal width; one line per error keeps the assertions exact.
    monkeypatch.setenv("COLUMNS", "400")


def run(args, capsys):
    code = 0
    try:
        main(args)
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_real_files(shared_data, capsys):
    code, out, _ = run(["validate", *map(str, CONFIGS), str(RUNNERS)], capsys)
    assert code == 0
    assert "208 config keys valid" in out
    assert f"ok  {RUNNERS} (runners file)" in out


def test_validate_warns_about_runner_labels_without_machines(tmp_path, capsys):
    runners = valid_runners()
    del runners["labels"]["cluster:gb200-nv"]
    code, _, err = run(["validate", str(write_recipe(tmp_path, runners=runners))], capsys)
    assert code == 0
    assert f"{MULTI}.runner: 'cluster:gb200-nv' is not a label in runners.yaml" in err


def test_validate_reports_every_error_of_every_file(tmp_path, capsys):
    a = valid_recipe()
    a[SINGLE]["scenarios"]["agentic-coding"][0]["search-space"][0]["tp"] = 0
    a[MULTI]["imgae"] = "x"
    first = write_recipe(tmp_path, a, name="a.yaml")
    b = {"other-key": valid_recipe()[SINGLE]}
    b["other-key"]["precision"] = ""
    second = tmp_path / "b.yaml"
    second.write_text(yaml.safe_dump(b))
    code, out, err = run(["validate", str(first), str(second)], capsys)
    assert code == 2
    flat = " ".join(err.split())
    assert f"{SINGLE}.agentic-coding[0].search-space[0].tp: must be > 0, got 0" in flat
    assert f"{MULTI}.imgae: unknown key 'imgae'; did you mean 'image'?" in flat
    assert "other-key.precision: must be at least 1 character(s) long" in flat
    assert "3 error(s) in 2 file(s)" in flat
    assert "ok  " not in out


def test_validate_cross_checks_budgets_with_runners(tmp_path, capsys):
    runners = valid_runners()
    del runners["hardware"]["cluster:b300-nv"]
    path = write_recipe(tmp_path, runners=runners)
    code, _, err = run(["validate", str(path)], capsys)
    assert code == 2
    assert "runner 'cluster:b300-nv' has no entry under 'hardware'" in " ".join(err.split())


def test_validate_bad_runners_file(tmp_path, capsys):
    runners = valid_runners()
    runners["hardware"]["cluster:b300-nv"]["gpus-per-nod"] = 8
    runners["labels"]["empty"] = []
    path = write_recipe(tmp_path, runners=runners)
    code, _, err = run(["validate", str(path), str(tmp_path / "runners.yaml")], capsys)
    flat = " ".join(err.split())
    assert code == 2
    assert "hardware.cluster:b300-nv.gpus-per-nod: unknown key 'gpus-per-nod'; did you mean " \
           "'gpus-per-node'?" in flat
    assert "empty: ['empty']" in flat


def test_matrix_json_takes_several_values_per_flag(shared_data, capsys):
    code, out, _ = run(["matrix", "--config-files", *map(str, CONFIGS), "--runner-config",
                        str(RUNNERS), "--no-evals", "--scenario-type", "agentic-coding",
                        "--format", "json"], capsys)
    assert code == 0
    assert len(json.loads(out)) == 746


def test_matrix_finds_runners_beside_the_recipe_and_prints_a_table(tmp_path, capsys):
    path = write_recipe(tmp_path)
    code, out, _ = run(["matrix", "--config-files", str(path), "--format", "table",
                        "--scenario-type", "agentic-coding", "fixed-seq-len"], capsys)
    assert code == 0
    assert "15 rows from 2 config keys" in out
    assert "hicache:2" in out


def test_matrix_output_file_holds_the_same_rows(tmp_path, capsys):
    path = write_recipe(tmp_path)
    target = tmp_path / "jobs.json"
    code, out, _ = run(["matrix", "--config-files", str(path), "--format", "json", "--output",
                        str(target)], capsys)
    assert code == 0
    assert target.read_text().strip() == out.strip()
    # both scenarios, as the generator: agentic 3 + 3 + 2 single-node and 2 multi-node, and
    # the 5 fixed-seq-len rows
    assert len(json.loads(out)) == 15


def test_matrix_without_runners_says_where_it_looked(tmp_path, capsys):
    path = write_recipe(tmp_path)
    (tmp_path / "runners.yaml").unlink()
    code, _, err = run(["matrix", "--config-files", str(path), "--format", "json"], capsys)
    assert code == 2
    assert "no runners.yaml beside" in err and "--runner-config" in err


def test_matrix_rejects_unknown_format(tmp_path, capsys):
    code, _, err = run(["matrix", "--config-files", str(write_recipe(tmp_path)), "--format",
                        "csv"], capsys)
    assert code == 2 and "allowed: json, table" in err


@pytest.mark.parametrize("args,expected", [
    (["--config-files", "a", "b", "--no-evals"],
     ["--config-files", "a", "--config-files", "b", "--no-evals"]),
    (["--scenario-type", "x", "--max-conc", "4", "c"],
     ["--scenario-type", "x", "--max-conc", "4", "c"]),
    (["--config-keys", "k*", "j", "--", "z"],
     ["--config-keys", "k*", "--config-keys", "j", "--", "z"]),
])
def test_spread_multi_values(args, expected):
    assert spread_multi_values(args) == expected


def test_matrix_help_keeps_option_help_and_positive_flags(capsys):
    code, out, _ = run(["matrix", "--help"], capsys)
    flat = " ".join(out.split())
    assert code == 0
    assert "table on a terminal" in flat
    assert "--no-evals" in flat and "--no-no-evals" not in flat
