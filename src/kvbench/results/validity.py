"""The validity stamp of a result: one `valid` with the reasons, and every check behind it, so
a table or a chart can say at a glance whether to believe a number.

Checks (each passed: true, false, or null where it does not apply or cannot be known):
- ideal_cache: the engine's hit rate may not exceed what an unlimited cache would reach on the
  requests sent (replay/ideal.py); above it, hits came from outside the run;
- warm_cache: no session's first request hit KV this run had not sent (the run marker held);
- offload_tier: an offload arm served some prompt tokens from the host or external tier;
- client: the load client was not saturated (its timings are the run's, not its own lag);
- failed_ratio: failed requests within the threshold;
- prompt_size: the server counted the prompt tokens the client meant to send (within 2%);
- usage: no response reported impossible usage (replay's `bad_usage` failures);
- label: the recipe's labels (offload, speculative decoding, page size) match what the
  engine reported."""

from __future__ import annotations

from typing import Any

# The ceiling is computed on the prompt tokens sent and the achieved rate on the server's
# count, which adds the chat template: allow that much above the ceiling.
CEILING_SLACK = 0.02


def _check(passed: bool | None, message: str, **detail: Any) -> dict[str, Any]:
    return {"passed": passed, "message": message, **detail}


def _ideal(summary: dict, server: dict) -> dict[str, Any]:
    ideal = (summary.get("cache") or {}).get("ideal_hit_rate")
    cache = (server.get("cache") or {}) if server.get("present") else {}
    achieved = {"device": cache.get("gpu_cache_hit_rate"), "host": cache.get("cpu_cache_hit_rate"),
                "external": cache.get("external_cache_hit_rate"),
                "total": cache.get("overall_cache_hit_rate")}
    source = "server"
    if achieved["total"] is None:  # no server counters: the per-request usage the engine sent
        achieved["total"] = (summary.get("cache") or {}).get("hit_rate")
        source = "usage"
    total = achieved["total"]
    if ideal is None or total is None:
        return _check(None, "ideal-cache ceiling or achieved hit rate unknown",
                      ideal_hit_rate=ideal, achieved=achieved, achieved_source=source)
    ok = total <= ideal + CEILING_SLACK
    msg = (f"hit rate {total:.1%} of an ideal {ideal:.1%}" if ok else
           f"hit rate {total:.1%} exceeds the ideal-cache ceiling {ideal:.1%}: hits came "
           f"from KV this run did not send")
    return _check(ok, msg, ideal_hit_rate=ideal, achieved=achieved, achieved_source=source,
                  of_ideal=total / ideal if ideal else None)


def _warm(summary: dict) -> dict[str, Any]:
    w = summary.get("warm_cache") or {}
    passed = w.get("passed")
    if passed is None:
        return _check(None, "no first request with cached-token usage to check")
    if passed:
        return _check(True, f"{w['checked_sessions']} sessions' first requests hit only this "
                            f"run's KV", checked_sessions=w["checked_sessions"])
    s = (w.get("suspects") or [{}])[0]
    return _check(False, f"{w['suspect_sessions']} of {w['checked_sessions']} sessions' first "
                         f"requests hit KV from before the run (e.g. {s.get('session_id')}: "
                         f"{s.get('cached_tokens')} cached tokens, at most "
                         f"{s.get('allowed_tokens')} possible)",
                  checked_sessions=w["checked_sessions"], suspects=w.get("suspects"))


def _offload(row: dict, server: dict, flags: set[str]) -> dict[str, Any]:
    if row.get("kv-offloading", "none") == "none":
        return _check(None, "resident arm: no offload tier")
    if not server.get("present"):
        return _check(None, "offload arm without server metrics: tier use unknown")
    tiers = (server.get("cache") or {}).get("cached_tokens_by_tier") or {}
    tokens = sum(v or 0 for t, v in tiers.items() if t != "device")
    if "offload-tier-never-hit" in flags or not tokens:
        return _check(False, "offload arm, but no prompt token was served from the host or "
                             "external tier", offload_hit_tokens=tokens)
    return _check(True, f"{tokens:,} prompt tokens served from the offload tier",
                  offload_hit_tokens=tokens)


def _client(client: dict | None) -> dict[str, Any]:
    if not client:
        return _check(None, "no client health report")
    if client.get("clock") == "virtual":  # the server's stamps: no lag of the client's in them
        return _check(True, client.get("note") or "the server's clock waited for the client")
    if client.get("saturated"):
        return _check(False, "load client saturated: " + "; ".join(
            map(str, client.get("reasons") or [])))
    return _check(True, "load client kept up")


def _failed(check: dict) -> dict[str, Any]:
    ratio, limit = check.get("failed_request_ratio"), check.get("failed_request_threshold")
    if ratio is None:
        return _check(False, "no request was measured", value=None, threshold=limit)
    return _check(ratio <= limit, f"{ratio:.1%} of requests failed (threshold {limit:.0%})",
                  value=ratio, threshold=limit)


def _usage(summary: dict) -> dict[str, Any]:
    """Responses whose usage cannot be true (replay's `bad_usage` failures): the server's
    counts are not to be believed, however few they are."""
    bad = ((summary.get("requests") or {}).get("errors_by_kind") or {}).get("bad_usage", 0)
    if bad:
        return _check(False, f"{bad} response(s) reported impossible usage (negative or "
                      "non-integer counts, or more completion tokens than max_tokens)",
                      value=bad)
    return _check(True, "every response's usage was possible")


def _prompt(summary: dict) -> dict[str, Any]:
    p = summary.get("prompt") or {}
    if p.get("agrees") is None:
        return _check(None, "the server reported no prompt usage to compare")
    dev = p["deviation"]
    msg = (f"server counted {p['server_tokens']:,} prompt tokens for {p['sent_tokens']:,} sent "
           f"({dev:+.1%})")
    if not p["agrees"]:
        msg += (f", beyond {p['tolerance']:.0%} (or {p.get('template_tokens_per_request', 0)} "
                "per request of chat template): the reuse the server sees is not the trace's "
                "(pass the model's --tokenizer, or send token ids)")
    return _check(p["agrees"], msg, **{k: p[k] for k in ("sent_tokens", "server_tokens",
                                                           "deviation")})


def _label(server: dict, check: dict) -> dict[str, Any]:
    bad = [f["message"] for f in check.get("flags") or [] if f["code"].startswith("label-")]
    reported = {k: v for k, v in (server.get("engine_reported") or {}).items() if v is not None}
    if bad:
        return _check(False, "; ".join(bad), engine_reported=reported)
    if not reported:
        return _check(None, "the engine reported none of the labelled settings")
    return _check(True, "labels match what the engine reported", engine_reported=reported)


def validity(*, row: dict, summary: dict | None, server: dict, client: dict | None,
             check: dict) -> dict[str, Any]:
    """{valid, reasons, checks} for one job that ran (`check` is validate()'s output)."""
    summary = summary or {}
    flags = {f["code"] for f in check.get("flags") or []}
    checks = {
        "ideal_cache": _ideal(summary, server),
        "warm_cache": _warm(summary),
        "offload_tier": _offload(row, server, flags),
        "client": _client(client),
        "failed_ratio": _failed(check),
        "prompt_size": _prompt(summary),
        "usage": _usage(summary),
        "label": _label(server, check),
    }
    reasons = [f"{name}: {c['message']}" for name, c in checks.items() if c["passed"] is False]
    reasons += [f"validation: {f}" for f in check.get("failures") or []]
    out = {"valid": not reasons, "reasons": reasons, "checks": checks}
    if profile := summary.get("profile"):
        # a publication profile's verdict (replay/profile.py), beside kvbench's own: a run can
        # be a sound measurement and still not a submission (a short GPU run)
        out["submission"] = {k: profile[k] for k in ("profile", "submission_valid", "reasons")}
    return out


def not_run(status: str, failure: dict | None) -> dict[str, Any]:
    """The stamp of a job that did not produce measurements."""
    why = (failure or {}).get("reason") or f"job status {status}"
    return {"valid": False, "reasons": [f"{status}: {why}"], "checks": {}}
