"""The results directory (docs/results-layout.md): one directory per job, result.json last."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from kvbench.files import remove_own
from kvbench.results.schema import recorded_sessions
from kvbench.results.store import ORIGINAL_FILE, PLAN_FILE, RESULT_FILE, SCRAPE_FILE, SUMMARY_FILE

JOB_FILE = "job.json"
LOG_FILE = "server.log"
RECORDS_FILE = "records.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"
# Written by one attempt; cleared before the next so that nothing stale mixes in: a rescored
# earlier run's original result too (session 14: re-run jobs kept a result.orig.json of the
# run they replaced, which the next rescore then kept as theirs)
ATTEMPT_FILES = (PLAN_FILE, "command.json", "env.json", LOG_FILE, RECORDS_FILE, SUMMARY_FILE,
                 SCRAPE_FILE, TELEMETRY_FILE, RESULT_FILE, ORIGINAL_FILE, "workers.json",
                 RECORDS_FILE + ".gz", SCRAPE_FILE + ".gz")  # --compress
SWEEP_DIR = ".kvbench"  # executor state (Slurm scripts, task logs, the sweep's job list)


def sweep_dir(results: Path) -> Path:
    """`results/.kvbench`, created if missing; refused when it (or the results directory) is
    a symlink or not a directory, so executor state is never written through a link to
    somewhere else (issue 27: internal paths never follow a planted symlink)."""
    from kvbench.errors import SweepError

    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    path = results / SWEEP_DIR
    for p in (results, path):
        if p.is_symlink():
            raise SweepError(f"{p} is a symlink; kvbench writes its state only into a real "
                             "directory", hint=f"remove the link: rm {p}")
    try:
        path.mkdir(exist_ok=True)
    except FileExistsError:
        raise SweepError(f"{path} exists and is not a directory",
                         hint=f"remove it: rm {path}") from None
    return path


def result_status(job_dir: Path, fingerprint: str, profile: str | None = None,
                  corpus: Callable[[], str] | None = None) -> str | None:
    """The status of the job's result if it is for this fingerprint and was replayed under
    `profile` (the job's validity profile, None for none), else None. A result written
    before the profile was part of the fingerprint shares a run without one's fingerprint:
    the profile it records tells them apart. With `corpus` (the digest of the sessions the
    job would send now, workload/identity.py), an ok result that recorded other sessions, or
    none, is not this job's either: the fingerprint holds the trace files' bytes, and another
    kvbench may have read the same bytes as other sessions (when the gaps between turns came
    from the recorded think_time, a 50 s run sent 36 requests; from the stream's times, 14)."""
    data = _result_of(job_dir, fingerprint, profile)
    if data is None or (corpus is not None and _other_sessions(data, corpus)):
        return None
    return data.get("status")


def _result_of(job_dir: Path, fingerprint: str, profile: str | None) -> dict | None:
    """The job's result.json if it is for this fingerprint and profile, else None."""
    try:
        data = orjson.loads((job_dir / RESULT_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
        return None
    return data if _profile_of(data) in (None, profile) else None


def _other_sessions(result: dict, corpus: Callable[[], str]) -> bool:
    """Whether an ok result recorded other sessions than `corpus()`, or none. A failure has
    no sessions to compare (it may have stopped before the replay)."""
    return result.get("status") == "ok" and (
        recorded_sessions(result.get("workload")) != corpus())


def _profile_of(result: dict) -> str | None:
    """The validity profile a result's replay ran under, as it records it (None: none, or
    not recorded)."""
    judged = (result.get("validity") or {}).get("submission") or {}
    return judged.get("profile") or (result.get("workload") or {}).get("profile")


def is_done(job_dir: Path, fingerprint: str, *, profile: str | None = None,
            corpus: Callable[[], str] | None = None, rerun_failed: bool = True) -> bool:
    """Whether resume may skip the job: its result exists for the same fingerprint, profile
    and, given `corpus`, sessions (and, with `rerun_failed`, says ok)."""
    status = result_status(job_dir, fingerprint, profile, corpus)
    if status is None:
        return False
    return status == "ok" or not rerun_failed


def replayed_other_sessions(job_dir: Path, fingerprint: str, profile: str | None,
                            corpus: Callable[[], str]) -> bool:
    """Whether the job's result is of its options but of other sessions than it would send
    now (or does not say which): resume runs it again, and says why."""
    data = _result_of(job_dir, fingerprint, profile)
    return data is not None and _other_sessions(data, corpus)


def clear_attempt(job_dir: Path) -> None:
    """Remove what an interrupted or failed attempt left, so the next starts clean."""
    for name in ATTEMPT_FILES:
        remove_own(job_dir / name)


def resumed_line(results: Path, done: int, total: int | None = None) -> str:
    """What a rerun in the same results directory says: that it resumed, and how to start
    afresh instead (issue 39: a rerun reprinted the old table without a word)."""
    of = f"{done} of {total} jobs are" if total is not None else f"{done} result(s) are"
    return (f"resuming: {of} in {results} already (an earlier run; a job whose options are "
            f"unchanged is kept, not run again); to start afresh: rm -r {results}, or "
            "--results NEW_DIR")
