"""The CLI is the one error boundary: every usage error is one `error:` line plus a `hint:`
line and exit 2, never a traceback, with the typer (and its vendored click) pip installs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO
from fixtures.inferencex import CONFIGS

from kvbench.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    return e.value.code, capsys.readouterr().err


CASES = {
    "unknown command": (("bogus",), "kvbench: no such command 'bogus'", "see `kvbench --help`"),
    "command typo": (("plna",), "no such command 'plna'", "did you mean `plan`"),
    "unknown option": (("plan", "--bogus"), "kvbench plan: no such option --bogus",
                       "see `kvbench plan --help`"),
    "option typo": (("plan", "--config-file", "x"), "no such option --config-file",
                    "did you mean `--config-files`"),
    "bad int": (("replay", "--concurrency", "x"),
                "kvbench replay: invalid value for --concurrency (got 'x')",
                "kvbench replay --help"),
    "bad int with =": (("serve-sim", "--port=8o80"), "invalid value for --port (got '8o80')",
                       "kvbench serve-sim --help"),
    "missing value": (("replay", "--url"), "'--url' requires an argument", "--help"),
    "extra argument": (("version", "extra"), "kvbench version: got unexpected extra argument",
                       "kvbench version --help"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_usage_error_is_one_line_and_a_hint(name, capsys):
    argv, message, hint = CASES[name]
    code, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 2, err
    assert lines[0].startswith("error: ") and message.lower() in lines[0].lower(), lines[0]
    assert lines[1].startswith("hint: ") and hint in lines[1], lines[1]


def test_missing_required_option_names_it(capsys):
    code, err = run_cli(capsys, "replay", "--trace", "synthetic")
    assert code == 2
    assert "error: kvbench replay: Missing option '--url'" in err
    assert "Traceback" not in err


def test_unknown_config_key_suggests_close_keys_not_the_whole_list(capsys):
    code, err = run_cli(capsys, "matrix", "--config-files", str(CONFIGS[1]), "--config-keys",
                        "dsv4-fp4-b200-vllm-agentic-mpt")
    assert code == 2
    hint = err.splitlines()[1]
    assert hint.startswith("hint: did you mean dsv4-fp4-b200-vllm-agentic-mtp")
    assert hint.count("dsv4") <= 3 and "qwen" not in hint


def test_unknown_config_key_with_no_close_match_says_how_to_list(capsys):
    code, err = run_cli(capsys, "matrix", "--config-files", str(CONFIGS[1]), "--config-keys",
                        "zzz")
    assert code == 2
    assert "none of the 152 keys is close" in err and len(err.splitlines()) == 2


def test_real_process_prints_no_traceback_with_the_installed_typer():
    """A subprocess, as a user runs it: argv from sys.argv, prog name `kvbench`."""
    out = subprocess.run([sys.executable, "-m", "kvbench", "simulate", "--bogus-flag"],
                         capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2
    assert out.stderr.startswith("error: kvbench simulate: no such option --bogus-flag")
    assert "Traceback" not in out.stderr


def test_plain_click_errors_are_recognised_too():
    """Older typer raises plain click's exceptions; the boundary takes both kinds."""
    import click

    from kvbench.cli.usage import usage_error

    problem = usage_error(click.exceptions.NoSuchOption("--bogus", possibilities=["--bogs"]), [])
    assert problem.message == "kvbench: no such option --bogus"
    assert problem.hint.startswith("did you mean `--bogs`?")
    assert usage_error(ValueError("not a usage error"), []) is None


def test_a_path_the_system_refuses_is_a_clean_error(capsys, tmp_path):
    code, err = run_cli(capsys, "report", "x" * 5000, "-o", str(tmp_path / "d.html"))
    assert code == 2
    assert err.startswith("error: cannot access 'xxx") and "File name too long" in err
    assert "Traceback" not in err and len(err) < 400
