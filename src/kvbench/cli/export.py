"""`kvbench export`: results in another project's format (InferenceX's agentic artifacts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.errors import ResultError

FORMATS = ("inferencex",)


@app.command()
def export(
    result_dirs: Annotated[list[Path], typer.Argument(help="Result dirs or result.json files.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write into.")],
    format: Annotated[str, typer.Option(
        "--format", help=f"Output format: {', '.join(FORMATS)}.")] = "inferencex",
) -> None:
    """Write each point as InferenceX ingests it: the aggregate JSON (bmk_agentic_*) and
    the raw AIPerf-layout sidecar (agentic_*: profile_export.jsonl, profile_export_aiperf.json,
    server_metrics_export.json/.csv, server.log) its aggregator and validation read."""
    import orjson

    from kvbench.export.point import FAILED_REQUEST_THRESHOLD, export_job
    from kvbench.files import read_bounded
    from kvbench.metrics.inferencex import cache_share
    from kvbench.results.reuse import inferencex_line
    from kvbench.results.store import MAX_RESULT_BYTES, find_results

    if format not in FORMATS:
        raise ResultError(f"--format {format!r} is not a format kvbench exports (allowed: "
                          f"{', '.join(FORMATS)})")
    files = find_results(result_dirs)
    if not files:
        raise ResultError(f"no result.json under {', '.join(map(str, result_dirs))}")
    written = skipped = 0
    for path in files:
        result = orjson.loads(read_bounded(path, MAX_RESULT_BYTES, "result file", ResultError))
        why = None if result.get("status") == "ok" else f"status {result.get('status')}"
        if why is None and result.get("scenario_type") != "agentic-coding":
            why = f"scenario {result.get('scenario_type')} (InferenceX's agentic format)"
        if why:
            print(f"skipped  {path.parent}: {why}")
            skipped += 1
            continue
        point = export_job(path.parent, result, out)
        written += 1
        rm = point.agg["request_metrics"]
        ttft = rm["latency"]["ttft"].get("p90")
        verdict = ("accepted" if point.accepted else
                   f"refused (error rate {point.error_rate:.1%} > "
                   f"{FAILED_REQUEST_THRESHOLD:.0%} or no success)")
        print(f"exported {path.parent} -> {point.name}: "
              f"{point.agg['num_requests_successful']}/{point.agg['num_requests_total']} "
              f"requests, TTFT p90 {ttft if ttft is not None else '-'} s; "
              f"InferenceX validation {verdict}")
        cache = point.agg["server_metrics"]["cache"]
        share = cache_share(cache, point.agg["framework"], point.agg["kv_offloading"],
                            rm["cache"]["theoretical_cache_hit_rate"])
        print(f"         InferenceX draws {inferencex_line(share)}")
        for note in point.notes:
            print(f"         note: {note}")
    print(f"wrote {written} point(s) to {out}" + (f", skipped {skipped}" if skipped else ""))
