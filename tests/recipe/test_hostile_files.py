"""Hostile recipe files: wrong encodings, YAML alias bombs, absurd numbers, a directory or an
empty file. Each is one clean error naming the file (and line), exit 2, never a
traceback and never the repr of a huge value."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from kvbench.cli import main

QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text()


def bomb(levels: int = 9) -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


CASES = {
    "latin-1": (QUICKSTART.replace("quickstart", "quickstärt").encode("latin-1"),
                ":1: not UTF-8 (byte 0xe4 at offset"),
    "utf-16": (QUICKSTART.encode("utf-16"), ": the file is UTF-16-encoded; recipes are UTF-8"),
    "alias bomb": (bomb().encode(), ": YAML aliases expand to more than 500,000 nodes"),
    "bomb as a row value": (
        (bomb(7) + QUICKSTART.replace("dram-utilization: 0.5", "dram-utilization: *l6")).encode(),
        ": YAML aliases expand to more than"),
    ".inf": (QUICKSTART.replace("dram-utilization: 0.5", "dram-utilization: .inf").encode(),
             "agentic-coding[0].dram-utilization: must be <= 1, got inf"),
    # YAML 1.2 reads 1e308 as a float, as kvbench's loaders do (issue 27: validate and plan agree)
    "1e308": (QUICKSTART.replace("dram-utilization: 0.5", "dram-utilization: 1e308").encode(),
              "agentic-coding[0].dram-utilization: must be <= 1, got 1e+308"),
    "1.0e+308": (QUICKSTART.replace("dram-utilization: 0.5", "dram-utilization: 1.0e+308")
                 .encode(), "agentic-coding[0].dram-utilization: must be <= 1, got 1e+308"),
    "4,300-digit int": (QUICKSTART.replace("tp: 1, kv-offloading: none",
                                           "tp: " + "9" * 4300 + ", kv-offloading: none").encode(),
                        ": not valid YAML: an integer of 4300 digits is out of range"),
    "5,000-digit int": (QUICKSTART.replace("conc-list: [3, 6, 12] }",
                                           "conc-list: [" + "7" * 5000 + "] }", 1).encode(),
                        "not valid YAML: an integer of 5000 digits is out of range"),
    "empty file": (b"", ": the file is empty"),
    "only whitespace": (b"\n  \n", ": the file is empty"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_recipe_is_one_clean_error(name, tmp_path, capsys):
    content, message = CASES[name]
    path = tmp_path / "recipe.yaml"
    path.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        main(["validate", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2
    first = err.splitlines()[0]
    assert first.startswith(f"error: {path}") and message in first, first
    assert "Traceback" not in err and len(err) < 2000


def test_a_directory_is_not_a_recipe(tmp_path, capsys):
    d = tmp_path / "configs.yaml"
    d.mkdir()
    with pytest.raises(SystemExit) as e:
        main(["plan", "--config-files", str(d), "--runner-config",
              str(REPO / "examples" / "runners.yaml")])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {d}: is a directory, not a YAML file")


def test_a_runners_file_is_named_a_runners_file(tmp_path, capsys):
    """Named anything, a file with top-level `hardware` (or `labels`) is a runners file, and
    its errors are a runners file's errors."""
    path = tmp_path / "cluster.yaml"
    path.write_text("hardware:\n  cluster:x:\n    available-cpu-dram-mib: 10\n"
                    "    gpus-per-node: 8\n")
    with pytest.raises(SystemExit) as e:
        main(["validate", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "labels" in err.splitlines()[0] and "config key" not in err
    ok = tmp_path / "hosts.yaml"
    ok.write_text("labels:\n  x: [x_00]\n" + path.read_text())
    main(["validate", str(ok)])
    assert f"ok  {ok} (runners file)" in capsys.readouterr().out


def test_bomb_error_is_fast_and_bounded(tmp_path):
    from kvbench.errors import RecipeError
    from kvbench.recipe.source import read_yaml

    path = tmp_path / "b.yaml"
    path.write_text(bomb(12))  # 9**12 nodes if expanded
    with pytest.raises(RecipeError) as e:  # at the cap, not after expanding 9**12 nodes
        read_yaml(Path(path))
    assert "YAML aliases expand to more than 500,000 nodes" in str(e.value), e.value
