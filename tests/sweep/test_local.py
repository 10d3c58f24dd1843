"""The local executor on the embedded engine: failures, --continue-on-error, repeats, resume."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kvbench.files import read_json
from kvbench.matrix import Job, Selection, select_jobs
from kvbench.sweep import build_specs, failures_error, run_local
from kvbench.sweep.progress import SweepDisplay
from kvbench.sweep.quickstart import RECIPE, quickstart_options

pytestmark = pytest.mark.slow

RUNNERS = RECIPE.parent / "runners.yaml"


def quiet() -> SweepDisplay:
    return SweepDisplay(0, Console(file=io.StringIO()), live=False)


def jobs_at(conc: int) -> list[Job]:
    return select_jobs(Selection(config_files=(RECIPE,), runner_config=RUNNERS,
                                 min_conc=conc, max_conc=conc))


def options():
    return quickstart_options(100.0).model_copy(update={"max_requests": 4})


def test_continue_on_error_runs_everything_and_lists_failures(tmp_path):
    good = jobs_at(3)[0]
    bad = Job(good.config_key, {**good.row, "model": "no-such/model", "exp-name": "broken"},
              good.scenario)
    specs = build_specs([bad, good], options(), runner_config=RUNNERS)

    stopped = run_local(specs, tmp_path / "a", display=quiet())
    assert [o.status for o in stopped] == ["failed"]  # stops at the first failure

    outcomes = run_local(specs, tmp_path / "b", continue_on_error=True, display=quiet())
    assert [o.status for o in outcomes] == ["failed", "ok"]
    assert outcomes[0].phase == "plan" and "no-such/model" in outcomes[0].reason
    err = failures_error(outcomes)
    assert err is not None and err.errors[1].startswith("broken: plan: ")
    failed = read_json(tmp_path / "b" / "broken" / "result.json")
    assert failed["status"] == "failed" and failed["failure"]["stage"] == "plan"

    # Resume: the ok job is skipped, the failed one runs again (and fails again).
    again = run_local(specs, tmp_path / "b", continue_on_error=True, display=quiet())
    assert [o.status for o in again] == ["failed", "skipped"]
    kept = run_local(specs, tmp_path / "b", continue_on_error=True, rerun_failed=False,
                     display=quiet())
    assert [o.status for o in kept] == ["skipped", "skipped"]


def test_repeats_get_their_own_directories(tmp_path):
    specs = build_specs(jobs_at(3)[:1], options(), repeats=2, runner_config=RUNNERS)
    outcomes = run_local(specs, tmp_path, display=quiet())
    assert [o.status for o in outcomes] == ["ok", "ok"]
    first, second = (read_json(tmp_path / s.dir_name / "result.json") for s in specs)
    assert specs[1].dir_name == specs[0].dir_name + "__r1"
    assert first["fingerprint"] == second["fingerprint"]
    assert (first["repeat"], second["repeat"]) == (0, 1)
    for s in specs:
        names = {p.name for p in (tmp_path / s.dir_name).iterdir()}
        assert {"job.json", "plan.json", "command.json", "env.json", "server.log",
                "records.jsonl", "summary.json", "scrape.jsonl", "result.json"} <= names
