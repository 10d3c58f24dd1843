"""The results directory (docs/results-layout.md): one directory per job, result.json last."""

from __future__ import annotations

from pathlib import Path

import orjson

from kvbench.results.store import PLAN_FILE, RESULT_FILE, SCRAPE_FILE, SUMMARY_FILE

JOB_FILE = "job.json"
LOG_FILE = "server.log"
RECORDS_FILE = "records.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"
# Written by one attempt; cleared before the next so that nothing stale mixes in.
ATTEMPT_FILES = (PLAN_FILE, "command.json", "env.json", LOG_FILE, RECORDS_FILE, SUMMARY_FILE,
                 SCRAPE_FILE, TELEMETRY_FILE, RESULT_FILE, "workers.json",
                 RECORDS_FILE + ".gz", SCRAPE_FILE + ".gz")  # --compress
SWEEP_DIR = ".kvbench"  # executor state (Slurm scripts, task logs, the sweep's job list)


def result_status(job_dir: Path, fingerprint: str) -> str | None:
    """The status of the job's result if it is for this fingerprint, else None."""
    path = job_dir / RESULT_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
        return None
    return data.get("status")


def is_done(job_dir: Path, fingerprint: str, *, rerun_failed: bool = True) -> bool:
    """Whether resume may skip the job: its result exists for the same fingerprint (and, with
    `rerun_failed`, says ok)."""
    status = result_status(job_dir, fingerprint)
    if status is None:
        return False
    return status == "ok" or not rerun_failed


def clear_attempt(job_dir: Path) -> None:
    """Remove what an interrupted or failed attempt left, so the next starts clean."""
    for name in ATTEMPT_FILES:
        (job_dir / name).unlink(missing_ok=True)
