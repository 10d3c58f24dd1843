"""The local executor: jobs one after another on this machine, resuming finished ones."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from kvbench.errors import SweepError
from kvbench.files import write_json_atomic
from kvbench.sweep import layout
from kvbench.sweep.events import JobOutcome
from kvbench.sweep.job import run_job
from kvbench.sweep.progress import JobView, SweepDisplay
from kvbench.sweep.spec import JobSpec


def _sigterm_as_interrupt() -> None:
    """Slurm and CI stop jobs with SIGTERM, a closing terminal with SIGHUP: unwind like Ctrl-C
    so servers are torn down.
    SIGINT is set too, because a process started in the background of a shell inherits it
    ignored and Python then never raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def write_sweep_manifest(results: Path, specs: Sequence[JobSpec]) -> None:
    write_json_atomic(layout.sweep_dir(results) / "jobs.json",
                      [{"dir": s.dir_name, "fingerprint": s.fingerprint,
                        "config-key": s.config_key, "exp-name": s.exp_name, "repeat": s.repeat}
                       for s in specs])


def run_local(specs: Sequence[JobSpec], results: Path, *, continue_on_error: bool = False,
              rerun_failed: bool = True, display: SweepDisplay | None = None) -> list[JobOutcome]:
    """Run `specs` in order; skip those already done. Stops at the first failure unless
    `continue_on_error`; returns every outcome (raise nothing for job failures)."""
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    write_sweep_manifest(results, specs)
    _sigterm_as_interrupt()
    display = display or SweepDisplay(len(specs))
    outcomes: list[JobOutcome] = []
    with display:
        for spec in specs:
            job_dir = results / spec.dir_name
            if spec.done_in(results, rerun_failed=rerun_failed):
                outcome = JobOutcome(spec.dir_name, "skipped", reason="result exists",
                                     result_path=str(job_dir / layout.RESULT_FILE))
                display.job_finished(outcome)
                outcomes.append(outcome)
                continue
            display.job_started(spec.dir_name)
            outcome = run_job(spec, results, JobView(display))
            display.job_finished(outcome)
            outcomes.append(outcome)
            if outcome.status == "failed" and not continue_on_error:
                break
    return outcomes


def failures_error(outcomes: Sequence[JobOutcome]) -> SweepError | None:
    """One error naming every failed job, or None."""
    failed = [o for o in outcomes if o.status == "failed"]
    if not failed:
        return None
    err = SweepError(f"{len(failed)} job{'s' * (len(failed) != 1)} failed",
                     hint="see result.json and server.log in each job directory; "
                          "rerun the same command to resume")
    err.errors = [err.message, *(f"{o.dir_name}: {o.phase}: {o.reason}" for o in failed)]
    return err
