"""Assemble one job's result from the files of its stages (docs/results-layout.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kvbench import __version__
from kvbench.errors import ResultError
from kvbench.metrics.inferencex import cache_share
from kvbench.plan.plan import sizing_summary
from kvbench.results.accounting import request_accounting, request_metrics
from kvbench.results.reuse import cache_reuse
from kvbench.results.schema import STATUSES, Result
from kvbench.results.validate import DEFAULT_FAILED_REQUEST_THRESHOLD, validate
from kvbench.results.validity import not_run, validity

# validity checks that validate() does not flag itself, with the flag code they raise
_VALIDITY_FLAGS = {"ideal_cache": "above-ideal-ceiling", "warm_cache": "warm-cache-hit",
                   "prompt_size": "prompt-size-mismatch"}


def _num_gpus(row: dict[str, Any]) -> int:
    if "prefill" in row or "decode" in row:
        total = 0
        for side in ("prefill", "decode"):
            w = row.get(side) or {}
            total += int(w.get("num-worker", 1)) * int(w.get("tp", 1)) * int(
                w.get("pp", 1)) * int(w.get("pcp-size", 1))
        return max(1, total)
    return int(row.get("tp", 1)) * int(row.get("pp", 1)) * int(row.get("pcp-size", 1))


def _conc(row: dict[str, Any]) -> int:
    conc = row.get("conc", 0)
    return int(conc[0] if isinstance(conc, list) and conc else conc or 0)


def _energy(telemetry: dict[str, Any], server: dict[str, Any],
            summary: dict[str, Any] | None) -> dict[str, Any] | None:
    joules = telemetry.get("energy_j") if telemetry.get("present") else None
    if joules is None:
        return None
    tokens = server.get("tokens") or {}
    out_tok, in_tok, source = tokens.get("generation_total"), tokens.get("prompt_total"), "server"
    if not out_tok and summary:
        tp = summary.get("throughput") or {}
        window = summary.get("window_s") or 0
        out_tok = (tp.get("output_tok_s") or 0) * window
        in_tok = (tp.get("input_tok_s") or 0) * window
        source = "client"
    return {
        "energy_j": joules,
        "window_s": telemetry.get("window_s"),
        "tokens_source": source,
        "j_per_output_token": joules / out_tok if out_tok else None,
        "j_per_token": joules / (out_tok + (in_tok or 0)) if out_tok else None,
    }


def options_digest(identity: dict) -> str:
    """Result.options_id of a run's measurement identity (JSON-able; key order ignored)."""
    import hashlib

    import orjson

    return hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def _duration_s(row: dict, summary: dict | None) -> float | None:
    """The replay's bound as it ran (`kvbench run --duration 50` over a row whose matrix
    default says 3600; None: no time bound, e.g. sessions played once); the row's value only
    when there is no replay summary. The row itself keeps its own in job_row."""
    run = (summary or {}).get("run") or {}
    return run["duration_s"] if "duration_s" in run else row.get("duration")


def build_result(*, job_row: dict, config_key: str, plan: dict | None, summary: dict | None,
                 server: dict | None, telemetry: dict | None, status: str,
                 failure: dict | None = None, warnings: Sequence[str] = (),
                 fingerprint: str, repeat: int = 0,
                 engine_patches: Sequence[dict] | None = None,
                 failed_request_threshold: float = DEFAULT_FAILED_REQUEST_THRESHOLD,
                 options_id: str | None = None, run_options: dict | None = None) -> Result:
    """Build and validate a Result. A job that ran but fails validation comes back with
    status "failed" and failure.stage "validation"."""
    if status not in STATUSES:
        raise ResultError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    if not 0 <= failed_request_threshold <= 1:
        raise ResultError(f"failed_request_threshold must be in [0, 1], got "
                          f"{failed_request_threshold}")
    row = dict(job_row)
    server = dict(server) if server else {"present": False, "warnings": []}
    telemetry = dict(telemetry) if telemetry else {"present": False, "reason": "not sampled"}
    client = (summary or {}).get("client")
    accounting = request_accounting(summary)
    all_warnings = list(warnings) + list(server.get("warnings") or [])
    if not server.get("present") and status == "ok":
        all_warnings.append("server metrics absent: per-tier cache numbers are unknown")
    if status == "ok":
        check = validate(row=row, plan=plan, accounting=accounting, server=server,
                         client=client, threshold=failed_request_threshold)
        stamp = validity(row=row, summary=summary, server=server, client=client, check=check)
        for name, code in _VALIDITY_FLAGS.items():
            if stamp["checks"][name]["passed"] is False:
                check["flags"].append({"code": code, "message": stamp["checks"][name]["message"]})
        if not check["passed"]:
            status = "failed"
            failure = {"stage": "validation", "reason": "; ".join(check["failures"])}
    else:
        check = {"passed": False, "failed_request_ratio": None,
                 "failed_request_threshold": failed_request_threshold,
                 "failures": [f"job status {status}"], "flags": []}
        stamp = not_run(status, failure)
    all_warnings += [f"[{f['code']}] {f['message']}" for f in check["flags"]]
    backend = row.get("kv-offload-backend")
    multinode = "prefill" in row or "decode" in row
    return Result(
        kvbench_version=__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        status=status, failure=failure, fingerprint=fingerprint, config_key=config_key,
        exp_name=str(row.get("exp-name", config_key)), repeat=repeat, job_row=row,
        hw=str((plan or {}).get("hardware") or str(row.get("runner", "")).removeprefix(
            "cluster:")),
        runner=str(row.get("runner", "")), conc=_conc(row), image=row.get("image"),
        model=str(row.get("model", "")), infmax_model_prefix=row.get("model-prefix"),
        framework=str(row.get("framework", "")), precision=row.get("precision"),
        spec_decoding=str(row.get("spec-decoding") or "none"),
        disagg=bool(row.get("disagg", False)),
        scenario_type=str(row.get("scenario-type", "agentic-coding")),
        is_multinode=multinode, tp=int(row.get("tp", 1) or 1), ep=int(row.get("ep", 1) or 1),
        dp_attention=bool(row.get("dp-attn", False)), pp=int(row.get("pp", 1) or 1),
        dcp_size=int(row.get("dcp-size", 1) or 1), pcp_size=int(row.get("pcp-size", 1) or 1),
        num_gpus=_num_gpus(row), kv_offloading=str(row.get("kv-offloading", "none")),
        kv_offload_backend=backend if isinstance(backend, dict) else None,
        allocated_cpu_dram_gb=float(row.get("total-cpu-dram-gb", 0) or 0),
        router=row.get("router") if isinstance(row.get("router"), dict) else None,
        duration_s=_duration_s(row, summary),
        plan=plan,
        host_sizing=sizing_summary(plan),
        engine_patches=list(engine_patches) if engine_patches is not None else None,
        num_requests_total=accounting["records_total"],
        num_requests_successful=accounting["records_successful"],
        request_accounting=accounting,
        request_metrics=request_metrics(summary),
        server_metrics=server, telemetry=telemetry,
        energy=_energy(telemetry, server, summary), client=client,
        validation=check, validity=stamp, warnings=all_warnings, options_id=options_id,
        run_options=run_options,
        cache_reuse=cache_reuse(server, summary) if status == "ok" else None,
        inferencex_cache=_inferencex_cache(server, summary, row) if status == "ok" else None,
        workload=_workload(summary),
    )


def _inferencex_cache(server: dict, summary: dict | None, row: dict) -> dict | None:
    """The scrape's InferenceX reading with the share its dashboard draws for the point."""
    reading = server.get("inferencex")
    if not reading:
        return None
    ideal = ((summary or {}).get("cache") or {}).get("ideal_hit_rate")
    return {**reading, "share": cache_share(reading.get("cache"), row.get("framework"),
                                            row.get("kv-offloading"), ideal)}


def _workload(summary: dict | None) -> dict | None:
    run = (summary or {}).get("run") or {}
    if not run:
        return None
    keys = ("profile", "corpus", "inflight", "warmup_s", "warmup_per_lane",
            "max_context_tokens", "sessions_over_context", "seed")
    out = {k: run.get(k) for k in keys}
    start, end = run.get("profiling_started_ns"), run.get("profiling_ended_ns")
    out["profiling_s"] = (end - start) / 1e9 if start and end else None
    return out
