"""Checks a result against itself: failed-request ratio, offload tiers that were never hit,
and recipe labels that contradict what the engine reported."""

from __future__ import annotations

from typing import Any

DEFAULT_FAILED_REQUEST_THRESHOLD = 0.10


def _flag(flags: list[dict], code: str, message: str) -> None:
    flags.append({"code": code, "message": message})


def validate(*, row: dict[str, Any], plan: dict[str, Any] | None, accounting: dict[str, Any],
             server: dict[str, Any], client: dict[str, Any] | None,
             threshold: float = DEFAULT_FAILED_REQUEST_THRESHOLD) -> dict[str, Any]:
    """Returns {passed, failed_request_ratio, failed_request_threshold, failures, flags}.
    A failure fails the job; a flag marks a result a reader should not trust blindly."""
    failures: list[str] = []
    flags: list[dict] = []
    attempted = accounting["records_attempted"]
    errors = accounting["records_error_dropped"]
    ratio = errors / attempted if attempted else None
    if attempted == 0:
        failures.append("no profiled requests: nothing was measured")
    elif ratio > threshold:
        failures.append(f"failed-request ratio {ratio:.1%} ({errors}/{attempted}) exceeds "
                        f"the threshold {threshold:.0%}")
    elif accounting["records_successful"] == 0:
        failures.append("no successful requests")

    offload_label = row.get("kv-offloading", "none")
    reported = server.get("engine_reported") or {}
    if server.get("present"):
        tiers = (server.get("cache") or {}).get("cached_tokens_by_tier") or {}
        offload_hits = sum(v or 0 for t, v in tiers.items() if t != "device")
        if offload_label != "none" and offload_hits == 0:
            _flag(flags, "offload-tier-never-hit",
                  "offload arm, but the engine reported no prompt tokens served from the host "
                  "or external tier: the offload path was never exercised")
        engine_offload = reported.get("offload_enabled")
        if engine_offload is not None and engine_offload != (offload_label != "none"):
            _flag(flags, "label-offload-mismatch",
                  f"recipe says kv-offloading={offload_label} but the engine reports offload "
                  f"{'on' if engine_offload else 'off'}")
        label_spec = row.get("spec-decoding", "none") or "none"
        engine_spec = reported.get("spec_decoding")
        if engine_spec is not None and engine_spec != (label_spec != "none"):
            _flag(flags, "label-spec-mismatch",
                  f"recipe says spec-decoding={label_spec} but the engine reports speculative "
                  f"decoding {'on' if engine_spec else 'off'}")
        plan_page = (plan or {}).get("page_size_tokens") or (plan or {}).get("page-size-tokens")
        engine_page = reported.get("page_size_tokens")
        if plan_page and engine_page and int(plan_page) != int(engine_page):
            _flag(flags, "label-page-size-mismatch",
                  f"plan page size {int(plan_page)} tokens but the engine runs with "
                  f"{int(engine_page)}")
    if client and client.get("saturated"):
        reasons = "; ".join(str(r) for r in client.get("reasons") or []) or "no reason given"
        _flag(flags, "client-saturated", f"the load client was saturated: {reasons}")
    return {"passed": not failures, "failed_request_ratio": ratio,
            "failed_request_threshold": threshold, "failures": failures, "flags": flags}
