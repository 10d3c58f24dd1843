"""Rescoring: a job's result.json derived again from the raw files the run left beside it
(summary.json from the replay, scrape.jsonl of /metrics, plan.json), with this kvbench's
metric adapters and checks. A run measured before a check existed, or read by an adapter that
has since learnt a metric, gets the verdict it would get today; the measurements are the same
bytes. What only the run knew is kept from the old result: its status when the job did not
produce measurements, the failure, GPU telemetry, the engine patches, the fingerprint, the
repeat index and its own warnings. The first original stays as result.orig.json."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import orjson

from kvbench import __version__
from kvbench.errors import ResultError
from kvbench.files import iter_jsonl, jsonl_path, read_bounded, refuse_foreign, write_atomic
from kvbench.results.build import build_result
from kvbench.results.schema import Result
from kvbench.results.store import (
    MAX_RESULT_BYTES,
    ORIGINAL_FILE,
    PLAN_FILE,
    RECORDS_FILE,
    RESULT_FILE,
    SCRAPE_FILE,
    SUMMARY_FILE,
    write_result,
)
from kvbench.results.validate import DEFAULT_FAILED_REQUEST_THRESHOLD
from kvbench.units import GiB

_ABSENT_SERVER = "server metrics absent: per-tier cache numbers are unknown"
_RESCORED = "rescored by kvbench "


def _run_warnings(old: dict) -> list[str]:
    """The old result's warnings less those build_result derives again (server warnings,
    validation flags, the absent-metrics note, an earlier rescoring's line)."""
    derived = set((old.get("server_metrics") or {}).get("warnings") or []) | {_ABSENT_SERVER}
    return [w for w in old.get("warnings") or []
            if w not in derived and not w.startswith("[") and not w.startswith(_RESCORED)]


def _read(path: Path) -> dict:
    """A job file's JSON object, or a ResultError naming the file."""
    try:
        # summaries and plans are KBs; 1 GiB refuses only what cannot be one
        doc = orjson.loads(read_bounded(path, GiB, "job file", ResultError))
    except (OSError, ValueError) as e:
        raise ResultError(f"{path}: corrupt job file: {' '.join(str(e).split())[:200]}"
                          ) from None
    if not isinstance(doc, dict):
        raise ResultError(f"{path}: corrupt job file: a JSON {type(doc).__name__}, not an "
                          "object")
    return doc


def rescore_job(job_dir: Path, engine: str | None = None, options_id: str | None = None,
                absent_cached_tokens_are_zero: bool = False,
                run_options: dict | None = None) -> tuple[dict, Result]:
    """(old result as JSON, new Result) for the job directory `job_dir`; writes nothing.
    `options_id` stands in for a result written before kvbench recorded one (the caller
    derives it from the job's job.json), so old and new repeats of one job pool; so does
    `run_options`, the identity it is the digest of (results/option_sets.py names it).
    `absent_cached_tokens_are_zero`: the server reported cached tokens only when there were
    some (the caller knows the engine), so the cache block is read from the records again."""
    from kvbench.metrics import profiling_start_unix_ns, summarize_scrape
    from kvbench.replay.stats import cache_summary

    job_dir = Path(job_dir)
    path = job_dir / RESULT_FILE
    if not path.is_file():
        raise ResultError(f"{job_dir}: no {RESULT_FILE} to rescore")
    old = _read(path)
    missing = [k for k in ("job_row", "config_key", "fingerprint", "framework", "status")
               if k not in old]
    if missing:
        raise ResultError(f"{path}: not a kvbench result (no {', '.join(missing)})")
    summary_path = job_dir / SUMMARY_FILE
    if old.get("status") == "ok" and not summary_path.is_file():
        raise ResultError(f"{job_dir}: no {SUMMARY_FILE}: the replay's measurements are "
                          "needed to rescore", hint="rescore only directories `kvbench run` wrote")
    failure = old.get("failure")
    # a job failed by validation alone ran to the end: it is judged again
    ran = old.get("status") == "ok" or (failure or {}).get("stage") == "validation"
    summary = _read(summary_path) if summary_path.is_file() else None
    scrape = job_dir / SCRAPE_FILE  # or scrape.jsonl.gz: summarize_scrape reads either
    server = (summarize_scrape(scrape, engine or old["framework"],
                               profiling_start_unix_ns(summary)) if jsonl_path(scrape)
              else old.get("server_metrics"))
    plan = _read(job_dir / PLAN_FILE) if (job_dir / PLAN_FILE).is_file() else old.get("plan")
    records = job_dir / RECORDS_FILE  # or records.jsonl.gz
    if summary is not None and absent_cached_tokens_are_zero and jsonl_path(records):
        summary["cache"] = cache_summary(iter_jsonl(records), absent_cached_tokens_are_zero=True)
    stamp = (f"{_RESCORED}{__version__} on {datetime.now(UTC).date().isoformat()} from the "
             f"job's raw files (the run's own result: {ORIGINAL_FILE})")
    result = build_result(
        job_row=old["job_row"], config_key=old["config_key"], plan=plan,
        summary=summary, server=server,
        telemetry=old.get("telemetry"), status="ok" if ran else old["status"],
        failure=None if ran else failure, warnings=[*_run_warnings(old), stamp],
        fingerprint=old["fingerprint"], repeat=int(old.get("repeat") or 0),
        engine_patches=old.get("engine_patches"), options_id=old.get("options_id") or options_id,
        run_options=old.get("run_options") or run_options,
        failed_request_threshold=(old.get("validation") or {}).get(
            "failed_request_threshold") or DEFAULT_FAILED_REQUEST_THRESHOLD)
    result.created_at = old.get("created_at") or result.created_at  # when it was measured
    return old, result


def rescore(job_dir: Path, engine: str | None = None, options_id: str | None = None,
            absent_cached_tokens_are_zero: bool = False,
            run_options: dict | None = None) -> tuple[dict, Result]:
    """rescore_job, then keep the original (once) and replace result.json atomically."""
    old, result = rescore_job(job_dir, engine, options_id, absent_cached_tokens_are_zero,
                              run_options)
    original = Path(job_dir) / ORIGINAL_FILE
    # the first original is kept, never replaced; a link planted in its place (dangling, or
    # to another job's original) is refused, not followed (files.refuse_foreign)
    refuse_foreign(original)
    if not os.path.lexists(original):
        write_atomic(original, read_bounded(Path(job_dir) / RESULT_FILE, MAX_RESULT_BYTES,
                                            "result file", ResultError))
    write_result(job_dir, result)
    return old, result
