"""The typer-free short paths (cli/fast.py): `--help`, `version`, `validate`, `plan` and
`matrix` give what typer gives (the same help, the same parameters to the same work, typer's
answer for anything unusual), and import neither typer nor rich, nor pydantic or numpy before
the command's work (the start-up figure: benchmarks/cli_startup.py)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from conftest import REPO

from kvbench.cli import _command, main
from kvbench.cli.fast import HELP, parse
from kvbench.cli.flags import SELECTION_FLAGS
from kvbench.cli.matrix_fast import MATRIX_FLAGS
from kvbench.cli.plan_fast import PLAN_FLAGS

SRC = REPO / "src"
EXAMPLES = REPO / "examples"
RECIPE = ["--config-files", str(EXAMPLES / "quickstart.yaml"), "--runner-config",
          str(EXAMPLES / "runners.yaml")]
HEAVY = ("typer", "click", "rich", "pydantic", "numpy", "yaml")


def _kvbench(*args: str, env: dict[str, str] | None = None, fast: bool = True
             ) -> tuple[subprocess.CompletedProcess, list[str]]:
    """A kvbench process (piped), and which of HEAVY it had imported at its end."""
    code = ("import sys\nfrom kvbench.cli import main\n"
            f"try:\n    main(sys.argv[1:], fast={fast})\n"
            "finally:\n    print('MODULES', ' '.join(m for m in " + repr(HEAVY)
            + " if m in sys.modules), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(SRC), **(env or {})},
                         timeout=120)
    err, _, modules = res.stderr.rpartition("MODULES")
    res.stderr = err
    return res, modules.split()


def test_help_and_version_import_nothing_heavy():
    for args in (["--help"], [], ["version"]):
        res, modules = _kvbench(*args)
        assert res.returncode == (2 if not args else 0), res.stderr
        assert modules == [], (args, modules)
    assert _kvbench("version")[0].stdout.startswith("kvbench 0.1.0 (schema ")


def test_validate_and_plan_reach_their_work_without_typer_or_rich():
    res, modules = _kvbench("validate", str(EXAMPLES / "quickstart.yaml"),
                            str(EXAMPLES / "runners.yaml"))
    assert res.returncode == 0 and "1 config keys valid" in res.stdout, res.stderr
    assert not {"typer", "click", "rich"} & set(modules), modules  # pydantic: the loader's
    res, modules = _kvbench("plan", *RECIPE, "--format", "json")
    assert res.returncode == 0, res.stderr
    assert [p["within-budget"] for p in json.loads(res.stdout)] == [True] * 6
    assert not {"typer", "click", "rich", "numpy"} & set(modules), modules


@pytest.mark.parametrize("args", [["--help"], []])
def test_the_stored_help_is_typers_own(args):
    # piped: typer's plain 80-column render; the stored file is its colour render
    fast, _ = _kvbench(*args)
    slow, _ = _kvbench(*args, fast=False)
    assert (fast.stdout, fast.stderr, fast.returncode) == (
        slow.stdout, slow.stderr, slow.returncode)
    colour = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "80"}
    typer_render, _ = _kvbench("--help", env=colour, fast=False)
    assert typer_render.stdout.removesuffix("\n") == HELP.read_text(encoding="utf-8"), (
        "the commands' help changed: rewrite the stored help with "
        "`PYTHONPATH=src python -m kvbench.cli.fast`")


def test_help_another_width_or_forced_colour_is_typers():
    res, modules = _kvbench("--help", env={"COLUMNS": "100"})
    assert "typer" in modules and len(res.stdout.splitlines()[1]) == 100
    assert "typer" in _kvbench("--help", env={"FORCE_COLOR": "1"})[1]


def _calls(monkeypatch, argv: list[str], fast: bool) -> list:
    """What `argv` hands to the work functions (replaced by recorders), or the exit code."""
    import kvbench.cli.matrix_fast as matrix_fast
    import kvbench.cli.plan_fast as plan_fast
    import kvbench.cli.validate_fast as validate_fast

    calls: list = []
    monkeypatch.setattr(plan_fast, "run_plan", lambda *a, **k: calls.append(("plan", a, k)))
    monkeypatch.setattr(matrix_fast, "run_matrix", lambda *a: calls.append(("matrix", a)))
    monkeypatch.setattr(validate_fast, "run_validate",
                        lambda files: calls.append(("validate", list(files))))
    try:
        main(argv, fast=fast)
    except SystemExit as e:
        calls.append(("exit", e.code))
    return calls


@pytest.mark.parametrize("argv", [
    ["plan", *RECIPE, "--format", "json"],
    ["plan", "--config-files", "a.yaml", "b.yaml", "--max-conc=64", "--details",
     "--host-headroom-gb", "2.5", "--sizing", "launcher", "--force", "--trust-runner-dram"],
    ["plan", "--config-keys", "x*", "--scenario-type", "fixed-seq-len", "agentic-coding",
     "--host-headroom-gb=.5", "--format", "table", "--format", "json"],
    ["plan", "--host-headroom-gb", "1e3"],  # typer reads it; so does the fast path by deferring
    ["plan", "--max-conc", "ten"],
    ["plan", "--host-headroom-gb", "nan"],
    ["plan", "--predict"],
    ["matrix", *RECIPE, "--output", "rows.json", "--no-evals"],
    ["matrix", "--max-conc", "٣"],
    ["validate", "a.yaml", "configs"],
    ["validate"],
    ["version"],
])
def test_the_fast_path_hands_the_work_what_typer_does(monkeypatch, capsys, argv):
    fast = _calls(monkeypatch, argv, fast=True)
    fast_out = capsys.readouterr()
    slow = _calls(monkeypatch, argv, fast=False)
    slow_out = capsys.readouterr()
    if argv == ["plan", "--predict"]:  # typer's alone: it runs the prediction
        return
    assert fast == slow and fast_out == slow_out


@pytest.mark.parametrize("args", [
    ["--help"], ["--max-conc", "ten"], ["--no-evals=1"], ["--bogus"], ["positional"],
    ["--config-files"], ["--min-conc", "-1"], ["--host-headroom-gb", "inf"],
])
def test_the_fast_parser_leaves_the_unusual_to_typer(args):
    assert parse(args, PLAN_FLAGS, "plan") is None


def _kind(annotation: object) -> str:
    """The flag table's kind of a typer parameter's annotation."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    (inner,) = [m for m in members if m is not type(None)]
    if typing.get_origin(inner) is list:
        return {Path: "paths", str: "strs", int: "ints"}[typing.get_args(inner)[0]]
    kind = {str: "str", int: "int", float: "float", bool: "bool", Path: "path"}[inner]
    return kind + ("?" if type(None) in members else "")


@pytest.mark.parametrize("command, own, typer_only", [
    ("plan", PLAN_FLAGS, {"predict", "trace", "noise", "threshold", "emit", "emit_dir",
                          "workers", "bounds", "duration"}),
    ("matrix", MATRIX_FLAGS, set()),
])
def test_the_flag_tables_are_the_typer_commands(command, own, typer_only):
    from kvbench.cli import plan as plan_module
    from kvbench.cli import recipe as recipe_module

    click_command = _command().commands[command]
    params = {p.name: p for p in click_command.params}
    function = {"plan": plan_module.plan, "matrix": recipe_module.matrix}[command]
    hints = {name: p.annotation for name, p in inspect.signature(function).parameters.items()}
    table = [*((n, k, d) for n, k, d, _ in SELECTION_FLAGS), *own]
    assert {n for n, _, _ in table} | typer_only == set(params)
    for name, kind, default in table:
        param = params[name]
        assert param.opts == ["--" + name.replace("_", "-")] and not param.secondary_opts
        assert param.default == default and param.is_flag == (kind == "bool"), name
        assert param.multiple == (kind in ("paths", "strs", "ints")), name
        assert _kind(hints[name]) == kind, name
