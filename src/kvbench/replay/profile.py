"""Validity profiles: the rules a replay must follow for its result to be publishable, as data
with their sources, applied to a run's settings before it starts and checked against what it
did after.

`agentx-v1`: InferenceX AgentX v1.0, the AIPerf `inferencex-agentx-mvp` scenario as InferenceX
runs it (inferencex-e2e/benchmarks/benchmark_lib.sh, build_replay_cmd, and
inferencex-e2e/docs/eval-agentx-procedures.md §7 and §10, InferenceX fabe70b7): a profiling
duration of 3600 s by default and never below 900 s (shorter runs get AIPerf's
--unsafe-override and an invalid submission), 10 warm-up requests per trajectory lane, each
lane's first trajectory started at a sampled turn in 25-75% of its trace
(--trajectory-start-min/max-ratio), idle gaps between turns capped at 300 s
(--trace-idle-gap-cap-seconds), the first-turn prefix cache-busted per trace replay
(--cache-bust first_turn_prefix), a failed-request ratio of at most 0.10
(--failed-request-threshold, validate_agentic_result), and a fresh server deployment per
concurrency point. kvbench adds one of its own: at least 95% of the profiled requests must
carry complete metrics (first-token time and the server's prompt-token count), since a
result computed from a minority of requests is not the run's.

kvbench's replay busts caches per pass: a recycled trajectory replays in a fresh hash
namespace (workload/bounds.py), and every prompt starts with a per-run marker
(workload/prompt.py), so no replay can warm another's first-turn prefix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ValidityProfile:
    name: str
    source: str
    default_duration_s: float
    min_duration_s: float
    warmup_requests_per_lane: int
    start_ratio: tuple[float, float]
    idle_gap_cap_s: float
    max_failed_ratio: float
    min_metric_coverage: float
    fresh_server_per_concurrency: bool


AGENTX_V1 = ValidityProfile(
    name="agentx-v1",
    source="InferenceX fabe70b7 inferencex-e2e/benchmarks/benchmark_lib.sh build_replay_cmd; "
           "docs/eval-agentx-procedures.md §7, §10",
    default_duration_s=3600.0,
    min_duration_s=900.0,
    warmup_requests_per_lane=10,
    start_ratio=(0.25, 0.75),
    idle_gap_cap_s=300.0,
    max_failed_ratio=0.10,
    min_metric_coverage=0.95,
    fresh_server_per_concurrency=True,
)

PROFILES = {"agentx": AGENTX_V1, AGENTX_V1.name: AGENTX_V1}


def profile_named(name: str) -> ValidityProfile:
    from kvbench.errors import ReplayError

    try:
        return PROFILES[name]
    except KeyError:
        raise ReplayError(f"--profile {name!r} is not a validity profile (allowed: "
                          f"{', '.join(sorted(PROFILES))})") from None


def replay_settings(profile: ValidityProfile, concurrency: int, given: dict[str, Any]
                    ) -> dict[str, Any]:
    """The replay settings the profile asks for, where the user gave none (`given`: the
    option values the user set, by ReplayConfig field name). An explicit value wins and is
    judged afterwards: a short smoke run says it is not a submission instead of refusing."""
    wanted = {
        "duration_s": profile.default_duration_s,
        "warmup_requests": profile.warmup_requests_per_lane * concurrency,
        "start": "sampled",
        "start_ratio": profile.start_ratio,
        "think_time_cap_s": profile.idle_gap_cap_s,
    }
    return {k: v for k, v in wanted.items() if given.get(k) is None}


def verdict(profile: ValidityProfile, run: dict[str, Any], records: Iterable[dict[str, Any]],
            fresh_server: bool | None) -> dict[str, Any]:
    """{profile, submission_valid, reasons, checks} of one replay: `run` is the summary's
    run block, `records` the requests, `fresh_server` whether the server was started for this
    concurrency point alone (None: not known, as with `kvbench replay --url`)."""
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, passed: bool | None, message: str, **detail: Any) -> None:
        checks[name] = {"passed": passed, "message": message, **detail}

    duration, elapsed = run.get("duration_s"), run.get("elapsed_s")
    if duration is None or run.get("max_requests") is not None:
        check("duration", False, "a request-count bound, not a profiling duration; AgentX "
              f"profiles for a duration >= {profile.min_duration_s:g} s", value=duration)
    elif elapsed is not None and elapsed < duration:
        check("duration", False, f"the run ended after {elapsed:.0f} s of its {duration:g} s "
              "(every trace used up)", value=elapsed)
    else:
        check("duration", duration >= profile.min_duration_s,
              f"profiling duration {duration:g} s (minimum {profile.min_duration_s:g} s, "
              f"default {profile.default_duration_s:g} s)", value=duration)
    lanes = max(1, int(run.get("concurrency") or 1))
    warm = int(run.get("warmup_requests") or 0)
    need = profile.warmup_requests_per_lane * lanes
    check("warmup", warm >= need, f"{warm} warm-up requests for {lanes} lanes (needs "
          f"{profile.warmup_requests_per_lane} per lane = {need})", value=warm)
    start, ratio = run.get("start"), run.get("start_ratio")
    ok_start = start == "sampled" and ratio is not None and tuple(ratio) == profile.start_ratio
    lo, hi = profile.start_ratio
    check("start", ok_start, f"lanes start at {start or 'the beginning'}"
          + (f" in {ratio[0]:.0%}-{ratio[1]:.0%} of each trace" if ratio else "")
          + f" (AgentX: a sampled turn in {lo:.0%}-{hi:.0%})")
    cap = run.get("think_time_cap_s")
    check("idle_gap_cap", cap is not None and cap <= profile.idle_gap_cap_s,
          f"idle gaps capped at {cap} s (AgentX: {profile.idle_gap_cap_s:g} s)", value=cap)
    check("cache_bust", bool(run.get("run_marker")),
          "first-turn prefixes busted per replay (per-run marker, fresh namespace per pass)"
          if run.get("run_marker") else "no run marker: replays may share cached prefixes")
    # one pass over the records (a stream: an hour's replay is not held in memory)
    finished = failed = succeeded = complete = 0
    for r in records:
        if r.get("is_warmup") or r.get("status") == "cancelled":
            continue
        finished += 1
        if r.get("status") != "ok":
            failed += 1
            continue
        succeeded += 1
        complete += bool(r.get("t_first_ns") and r.get("prompt_tokens") is not None)
    ratio_failed = failed / finished if finished else None
    if ratio_failed is None:
        check("failed_ratio", False, "no profiled request finished", value=None)
    else:
        check("failed_ratio", ratio_failed <= profile.max_failed_ratio,
              f"{ratio_failed:.1%} of profiled requests failed (limit "
              f"{profile.max_failed_ratio:.0%})", value=ratio_failed)
    # over the requests that succeeded: the failed ones are the failed ratio's business
    coverage = complete / succeeded if succeeded else 0.0
    check("metric_coverage", coverage >= profile.min_metric_coverage,
          f"{coverage:.1%} of the successful profiled requests carry first-token time and "
          f"server prompt tokens (minimum {profile.min_metric_coverage:.0%})", value=coverage)
    if profile.fresh_server_per_concurrency:
        if fresh_server is None:
            check("fresh_server", False, "not known whether the server was started for this "
                  "concurrency alone (kvbench run starts one per job)")
        else:
            check("fresh_server", fresh_server, "a server deployment of its own" if
                  fresh_server else "the server served an earlier point")
    reasons = [f"{name}: {c['message']}" for name, c in checks.items() if c["passed"] is False]
    return {"profile": profile.name, "source": profile.source,
            "submission_valid": not reasons, "reasons": reasons, "checks": checks}
