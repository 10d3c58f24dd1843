"""The recipe parse cache (recipe/cache.py) and the typer-free `matrix` path (cli/fast.py,
cli/matrix_fast.py): same rows, no pydantic when cold and valid (recipe/plain.py), no YAML
parser either when warm, any edit a miss."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.cli.fast import parse
from kvbench.cli.matrix_fast import MATRIX_FLAGS
from kvbench.errors import RecipeError
from kvbench.recipe.cache import load_recipes

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copy(DATA / "nvidia-master.yaml", tmp_path / "nvidia-master.yaml")
    shutil.copy(DATA / "runners.yaml", tmp_path / "runners.yaml")
    return tmp_path / "nvidia-master.yaml", tmp_path / "runners.yaml"


def _matrix(master: Path, runners: Path, cache: Path, *extra: str) -> tuple[str, list[str]]:
    """stdout of a `kvbench matrix` process, and the heavy modules it imported."""
    code = ("import sys, runpy; sys.argv = ['kvbench', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('kvbench', run_name='__main__')\n"
            "finally:\n    print('MODULES', sorted(m for m in ('pydantic', 'typer', 'yaml')"
            " if m in sys.modules), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(SRC), "KVBENCH_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, "-c", code, "matrix", "--config-files", str(master),
                          "--runner-config", str(runners), "--format", "json", *extra],
                         capture_output=True, text=True, env=env, check=True)
    modules = res.stderr.rsplit("MODULES ", 1)[1].strip()
    return res.stdout, json.loads(modules.replace("'", '"'))


def test_warm_run_reads_the_cache_without_the_schema(files, tmp_path):
    master, runners = files
    cold, cold_modules = _matrix(master, runners, tmp_path / "cache")
    warm, warm_modules = _matrix(master, runners, tmp_path / "cache")
    assert cold == warm and len(json.loads(warm)) > 400
    assert cold_modules == ["yaml"]  # the plain schema validated: no pydantic, no typer
    assert warm_modules == []  # no pydantic, no YAML parser, no typer
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_a_cold_run_on_an_invalid_file_reports_through_the_schema(files, tmp_path):
    master, runners = files
    master.write_text(master.read_text().replace("tp: 2", "tp: two", 1))
    env = {**os.environ, "PYTHONPATH": str(SRC), "KVBENCH_CACHE_DIR": str(tmp_path / "c")}
    argv = ["--config-files", str(master), "--runner-config", str(runners)]
    matrix = subprocess.run([sys.executable, "-m", "kvbench", "matrix", *argv],
                            capture_output=True, text=True, env=env)
    validate = subprocess.run([sys.executable, "-m", "kvbench", "validate", str(master),
                               str(runners)], capture_output=True, text=True, env=env)
    assert matrix.returncode == validate.returncode == 2
    first = matrix.stderr.splitlines()[0]
    assert first.startswith(f"error: {master}:") and "tp" in first and "two" in first
    assert first == next(line for line in validate.stderr.splitlines()
                         if line.startswith("error: "))
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


def test_any_edit_is_a_miss(files, tmp_path, monkeypatch):
    master, runners = files
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    entries, _ = load_recipes([master], runners)
    key = "qwen3.5-fp8-b300-sglang-agentic-mtp"
    assert entries[key].raw["image"] == "lmsysorg/sglang:v0.5.16-cu130"
    text = master.read_text()
    master.write_text(text.replace("lmsysorg/sglang:v0.5.16-cu130", "lmsysorg/sglang:v9"))
    entries, _ = load_recipes([master], runners)
    assert entries[key].raw["image"] == "lmsysorg/sglang:v9"
    master.write_text(text.replace("tp: 2", "tp: two", 1))
    with pytest.raises(RecipeError):  # an invalid file is never served from the cache
        load_recipes([master], runners)
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_a_corrupt_cache_entry_is_ignored(files, tmp_path, monkeypatch):
    master, runners = files
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    first, _ = load_recipes([master], runners)
    for path in (tmp_path / "cache").iterdir():
        path.write_bytes(b"\x00garbage")
    again, facts = load_recipes([master], runners)
    assert again.keys() == first.keys() and facts.layout == "classic"


@pytest.mark.parametrize("args", [
    ["--help"], ["--max-conc", "ten"], ["--no-evals=1"], ["--bogus"], ["positional"],
    ["--config-files"],
])
def test_the_fast_parser_leaves_the_unusual_to_typer(args):
    assert parse(args, MATRIX_FLAGS, "matrix") is None


def test_the_fast_parser_reads_the_reference_spelling():
    values = parse(["--config-files", "a.yaml", "b.yaml", "--max-conc=64", "--no-evals",
                    "--scenario-type", "agentic-coding", "fixed-seq-len", "--format", "json"],
                   MATRIX_FLAGS, "matrix")
    assert values["config_files"] == [Path("a.yaml"), Path("b.yaml")]
    assert values["max_conc"] == 64 and values["no_evals"] is True
    assert values["scenario_type"] == ["agentic-coding", "fixed-seq-len"]


def test_typer_answers_what_the_fast_path_does_not(files, capsys):
    master, _ = files
    with pytest.raises(SystemExit) as info:
        main(["matrix", "--config-files", str(master), "--max-conc", "ten"])
    assert info.value.code == 2
    assert "ten" in capsys.readouterr().err
