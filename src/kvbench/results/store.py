"""result.json on disk: atomic writes, recursive loading with clear errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import ValidationError

from kvbench import SCHEMA_VERSION
from kvbench.errors import ResultError, validation_message
from kvbench.files import read_bounded, write_json_atomic
from kvbench.redaction import redact_json
from kvbench.results.schema import Result, impossible_metric

RESULT_FILE = "result.json"
# What a run leaves beside its result that a result is built from (sweep/layout.py lays the
# job directory out with these; results/rescore.py reads them back).
PLAN_FILE = "plan.json"
SUMMARY_FILE = "summary.json"
RECORDS_FILE = "records.jsonl"
SCRAPE_FILE = "scrape.jsonl"
# the run's own result, kept by the first `kvbench rescore` (results/rescore.py)
ORIGINAL_FILE = "result.orig.json"
_REPEAT_RE = re.compile(r"__r(\d+)$")


def write_result(job_dir: Path, result: Result) -> Path:
    """Write `job_dir/result.json` atomically (it is the job's completion marker)."""
    # by value too: log tails and failure reasons quote what the server printed
    return write_json_atomic(Path(job_dir) / RESULT_FILE,
                             redact_json(result.model_dump(mode="json")))


# A result is a few hundred KB (its request metrics, scrape summary and plan); 64 MiB is far
# past any, and refuses a planted multi-GB file at once instead of reading it whole.
MAX_RESULT_BYTES = 64 << 20


def read_result(path: Path) -> Result:
    raw_bytes = read_bounded(path, MAX_RESULT_BYTES, "result file", ResultError)
    try:
        raw = orjson.loads(raw_bytes)
    except orjson.JSONDecodeError as e:
        raise ResultError(f"{path}: not readable JSON: {e}") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version {version!r}, this kvbench reads "
                          f"{SCHEMA_VERSION}", hint="re-aggregate with the matching kvbench")
    try:
        result = Result.model_validate(raw)
    except ValidationError as e:
        raise ResultError(validation_message(e, f"{path}: invalid result")) from None
    bad = impossible_metric(result)
    if bad:
        raise ResultError(f"{path}: invalid result: {bad}",
                          hint="rescore the job from its raw files, or remove it")
    m = _REPEAT_RE.search(Path(path).parent.name)
    if m and not result.repeat:
        result.repeat = int(m.group(1))
    return result


def find_results(paths: Sequence[Path]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(p.rglob(RESULT_FILE)))
        else:
            raise ResultError(f"no such file or directory: {p}")
    return found


def load_results(paths: Sequence[Path]) -> list[Result]:
    """Results from files or directories (searched recursively for result.json)."""
    files = find_results(paths)
    if not files:
        raise ResultError(f"no {RESULT_FILE} under {', '.join(map(str, paths))}")
    return [read_result(f) for f in files]
