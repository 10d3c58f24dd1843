"""One kvbench job directory exported as the two GitHub artifacts InferenceX's agentic
benchmark job uploads for a point (InferenceX 843c6254f, .github/workflows/
benchmark-tmpl.yml:339-354), so its collection and ingest read them as their own:

```
bmk_agentic_<RESULT_FILENAME>/<RESULT_FILENAME>.json     the aggregate (export/agg.py)
agentic_<RESULT_FILENAME>/                               the raw `results/**` upload
  aiperf_artifacts/profile_export.jsonl                  one line per request (export/aiperf.py)
  aiperf_artifacts/profile_export_aiperf.json            counts, theoretical hit, AgentX verdict
  aiperf_artifacts/server_metrics_export.json            /metrics (metrics/aiperf.py)
  aiperf_artifacts/server_metrics_export.csv             the same, as the app's ingest reads it
  server.log                                             the engine log (pool size)
  inferencex_env.json                                    the workflow environment (export/env.py)
```

`agentic_<...>` is what the aggregator's RESULT_DIR points at: running InferenceX's
`process_agentic_result` there with that environment writes the aggregate again."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.errors import ResultError
from kvbench.export.agg import build_agg
from kvbench.export.aiperf import clock_offset_ns, profile_aggregate, record_lines
from kvbench.export.env import agg_header, backend_metadata, result_filename, workflow_env
from kvbench.files import jsonl_path, read_jsonl, write_atomic, write_json_atomic
from kvbench.metrics.aiperf import server_metrics_csv, server_metrics_export
from kvbench.metrics.window import profiling_start_unix_ns
from kvbench.results.store import RECORDS_FILE, SCRAPE_FILE, SUMMARY_FILE

ARTIFACTS = "aiperf_artifacts"
ENV_FILE = "inferencex_env.json"
SERVER_LOG = "server.log"
# InferenceX's CI limit on failed requests (benchmark-tmpl.yml:197,
# validate_agentic_result.py:74-80)
FAILED_REQUEST_THRESHOLD = 0.10


@dataclass(slots=True)
class Exported:
    name: str  # RESULT_FILENAME
    agg_path: Path
    raw_dir: Path
    agg: dict[str, Any]
    error_rate: float
    notes: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        """Whether InferenceX's result validation passes the point (error rate <= 10%)."""
        return self.agg["num_requests_successful"] > 0 and \
            self.error_rate <= FAILED_REQUEST_THRESHOLD


def export_job(job_dir: Path, result: dict[str, Any], out: Path) -> Exported:
    """Write `job_dir`'s point under `out` as InferenceX's artifacts; `result` is its
    result.json."""
    if jsonl_path(job_dir / RECORDS_FILE) is None:
        raise ResultError(f"{job_dir}: no {RECORDS_FILE}: a point is exported from its "
                          f"request records")
    row = result["job_row"]
    env = workflow_env(row, str(row.get("runner") or result.get("runner") or ""))
    repeat = result.get("repeat") or 0
    if not repeat and (m := re.search(r"__r(\d+)$", job_dir.name)):
        repeat = int(m.group(1))
    name = result_filename(env, repeat)
    header, num_gpus = agg_header(env)
    records = read_jsonl(job_dir / RECORDS_FILE)
    summary = json.loads((job_dir / SUMMARY_FILE).read_text()) \
        if (job_dir / SUMMARY_FILE).is_file() else {}
    lines = record_lines(records, clock_offset_ns(records, (summary.get("run") or {})
                                                  .get("started_unix_s")))
    submission = ((result.get("validity") or {}).get("submission"))
    aggregate = profile_aggregate(lines, records, submission)
    scrape = read_jsonl(job_dir / SCRAPE_FILE) if jsonl_path(job_dir / SCRAPE_FILE) else []
    url = (summary.get("run") or {}).get("url")
    server = server_metrics_export(scrape, f"{url.rstrip('/')}/metrics" if url else None,
                                   profiling_start_unix_ns(summary))
    log = job_dir / SERVER_LOG
    log_text = log.read_text(errors="replace") if log.is_file() else None
    try:
        agg = build_agg(header, num_gpus, lines, aggregate, server["metrics"], log_text)
    except ValueError as e:
        raise ResultError(f"{job_dir}: {e}") from None

    raw = out / f"agentic_{name}"
    art = raw / ARTIFACTS
    art.mkdir(parents=True, exist_ok=True)
    write_atomic(art / "profile_export.jsonl",
                 "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    write_json_atomic(art / "profile_export_aiperf.json", aggregate)
    write_json_atomic(art / "server_metrics_export.json", server)
    write_atomic(art / "server_metrics_export.csv", server_metrics_csv(server))
    if log.is_file():
        shutil.copyfile(log, raw / SERVER_LOG)
    write_json_atomic(raw / ENV_FILE, {**env, "RESULT_FILENAME": name})
    agg_path = out / f"bmk_agentic_{name}" / f"{name}.json"
    agg_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(agg_path, json.dumps(agg, indent=2))

    counts = aggregate
    done = counts["completed_request_count"]["avg"]
    notes = []
    _, dropped = backend_metadata(row)
    if dropped:
        notes.append(f"kv-offload-backend {', '.join(dropped)}: kvbench fields InferenceX "
                     f"does not record (kept in result.json)")
    if not agg["server_metrics"]["present"]:
        notes.append("no /metrics scrape: server-side cache figures are empty")
    return Exported(name, agg_path, raw, agg,
                    counts["error_request_count"]["avg"] / done if done else 1.0, notes)
