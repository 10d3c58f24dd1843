"""Issue 39's rough edges, each a clear line and the right exit code: a closed pipe ends
quietly, an empty or failed results directory is an error, more lanes than sessions is said,
a row that needs sglang-router says how to install it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import INFERENCEX, REPO

from kvbench.cli import main
from kvbench.errors import SweepOptionError

BUNDLED = REPO / "src" / "kvbench" / "workload" / "data" / "claude-code"


@pytest.mark.parametrize("command", [["matrix"], ["plan"]])
def test_a_closed_pipe_ends_quietly(command):
    """`kvbench matrix | head`: the reader has what it wanted; no `error: cannot access:
    Broken pipe` (exit 2), the quiet status 1 click gives every other command."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", *command, "--config-files",
         str(INFERENCEX / "nvidia-master.yaml"), "--runner-config",
         str(INFERENCEX / "runners.yaml"), "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PYTHONPATH": str(REPO / "src")})
    assert proc.stdout.read(100)
    proc.stdout.close()  # more than a pipe's 64 KiB is still to come
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1 and err == "", err


def test_rescore_of_a_directory_without_results_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["rescore", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: nothing to rescore: no result.json "
                                                f"under {tmp_path}"), err


@pytest.mark.parametrize("bound,said", [
    ([], "only 8 lanes ever have a session, so this measures 8 concurrent sessions, not 12"),
    (["--max-requests", "12"], "4 lanes replay sessions again, each pass in a fresh"),
])
def test_more_lanes_than_sessions_is_said(capsys, bound, said):
    main(["simulate", "--trace", str(BUNDLED), "--concurrency", "12", *bound,
          "--max-tokens-cap", "4", "--think-time-scale", "0", "--format", "json"])
    err = capsys.readouterr().err
    assert f"12 session lanes on 8 sessions: {said}" in err, err


def test_a_row_behind_sglang_router_says_how_to_install_it(monkeypatch):
    """examples/disagg.yaml after the README's `pip install -e .`: refused before any job
    starts, with the install command (it ended in ModuleNotFoundError: sglang_router)."""
    import importlib.util

    from kvbench.matrix import Selection, select_jobs
    from kvbench.sweep.multinode import check_router_installed

    recipe = REPO / "examples" / "disagg.yaml"
    jobs = select_jobs(Selection(config_files=(recipe,),
                                 runner_config=recipe.parent / "runners.yaml"))
    check_router_installed(jobs)  # installed here (.ci/install): nothing to say
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sglang_router" else real(name, *a))
    with pytest.raises(SweepOptionError) as e:
        check_router_installed(jobs)
    assert e.value.exit_code == 2
    assert e.value.message.startswith("qwen3-8b-bf16-h100-sim-agentic-disagg runs its workers "
                                      "behind sglang-router")
    assert e.value.hint == "pip install sglang-router==0.3.2"
