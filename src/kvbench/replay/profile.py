"""Validity profiles: the rules a replay must follow for its result to be publishable, as data
with their sources, applied to a run's settings before it starts and checked against what it
did after.

`agentx-v1`: InferenceX AgentX v1.0, the `agentx` scenario of InferenceX's replay client
(SemiAnalysisAI/agentx-harness, an AIPerf fork: src/aiperf/common/scenario/
inferencex_agentx_mvp.py `AGENTX` at 6f666ba0, its context-overflow settings in
src/aiperf/common/environment.py `_AgentXSettings` at de0e17de) as InferenceX runs it
(inferencex-e2e/benchmarks/benchmark_lib.sh build_replay_cmd, docs/eval-agentx-procedures.md
§7 and §10, InferenceX fabe70b7):
- a profiling duration of 3600 s by default and never below 900 s (shorter runs need the
  harness's --unsafe-override and are not a submission);
- 10 warm-up requests per trajectory lane; each lane's first trajectory started at a sampled
  turn in 25-75% of its trace (--trajectory-start-min/max-ratio);
- recorded think times honoured (--ignore-trace-delays and an inter-turn delay cap are
  forbidden), idle gaps within a trace capped at 300 s (--trace-idle-gap-cap-seconds), and
  when nothing is in flight anywhere the pending timers shift together so that the next
  request leaves within 10 s (--system-idle-gap-cap-seconds, locked);
- no client-side input truncation (--synthesis-max-isl is forbidden), ignore_eos=true on
  every request, streaming;
- the first-turn prefix cache-busted per trace replay (--cache-bust first_turn_prefix);
- a failed-request ratio of at most 0.10 (--failed-request-threshold, validate_agentic_result;
  context overflows are not counted as failures), and a context-overflow rate (an error whose
  body names the context limit, over all responses) of at most 1%, a session ending at its
  first overflow;
- first-token or inter-token observations reaching through at least 95% of the profiling
  phase (minimum_profile_metric_coverage_ratio: a server that stops answering mid-run is
  caught even though every request it did answer is complete);
- a fresh server deployment per concurrency point.
kvbench adds one of its own: at least 95% of the successful profiled requests must carry
complete metrics (first-token time and the server's prompt-token count), since a result
computed from a minority of requests is not the run's.

kvbench's replay busts caches per pass: a recycled trajectory replays in a fresh hash
namespace (workload/bounds.py), and every prompt starts with a per-run marker
(workload/prompt.py), so no replay can warm another's first-turn prefix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvbench.replay.overflow import CONTEXT_OVERFLOW


@dataclass(frozen=True, slots=True)
class ValidityProfile:
    name: str
    source: str
    default_duration_s: float
    min_duration_s: float
    warmup_requests_per_lane: int
    start_ratio: tuple[float, float]
    idle_gap_cap_s: float  # within one trace (kvbench: between a session's turns)
    system_idle_cap_s: float  # when nothing is in flight anywhere
    max_failed_ratio: float
    max_context_overflow_ratio: float
    min_phase_coverage: float  # of the profiling phase reached by token observations
    min_request_coverage: float  # kvbench's own: successful requests with complete metrics
    fresh_server_per_concurrency: bool


AGENTX_V1 = ValidityProfile(
    name="agentx-v1",
    source="SemiAnalysisAI/agentx-harness 6f666ba0 src/aiperf/common/scenario/"
           "inferencex_agentx_mvp.py (AGENTX), de0e17de src/aiperf/common/environment.py "
           "(_AgentXSettings); InferenceX fabe70b7 inferencex-e2e/benchmarks/benchmark_lib.sh "
           "build_replay_cmd, docs/eval-agentx-procedures.md §7, §10",
    default_duration_s=3600.0,
    min_duration_s=900.0,
    warmup_requests_per_lane=10,
    start_ratio=(0.25, 0.75),
    idle_gap_cap_s=300.0,
    system_idle_cap_s=10.0,
    max_failed_ratio=0.10,
    max_context_overflow_ratio=0.01,
    min_phase_coverage=0.95,
    min_request_coverage=0.95,
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
        "system_idle_cap_s": profile.system_idle_cap_s,
        "end_session_on_context_overflow": True,
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
    idle = run.get("system_idle_cap_s")
    check("system_idle_cap", idle == profile.system_idle_cap_s,
          f"system-wide idle capped at {idle} s (AgentX locks {profile.system_idle_cap_s:g} s)",
          value=idle)
    scale = run.get("think_time_scale", 1.0)
    check("trace_delays", scale == 1.0, f"recorded think times x {scale:g} (AgentX replays "
          "them as recorded)", value=scale)
    cut = run.get("max_input_tokens")
    check("input_truncation", cut is None, "no client-side input bound" if cut is None else
          f"turns above {cut} input tokens skipped (AgentX forbids input truncation)", value=cut)
    eos = bool(run.get("ignore_eos", True)) and "ignore_eos" not in run.get("dropped_fields", [])
    check("ignore_eos", eos, "ignore_eos=true on every request" if eos else
          "ignore_eos not sent (AgentX requires it: outputs run to the recorded length)")
    check("cache_bust", bool(run.get("run_marker")),
          "first-turn prefixes busted per replay (per-run marker, fresh namespace per pass)"
          if run.get("run_marker") else "no run marker: replays may share cached prefixes")
    # one pass over the records (a stream: an hour's replay is not held in memory)
    finished = failed = overflowed = succeeded = complete = 0
    first_send_ns = last_seen_ns = None
    for r in records:
        if first_send_ns is None or (r.get("t_send_ns") or first_send_ns) < first_send_ns:
            first_send_ns = r.get("t_send_ns")
        if r.get("is_warmup") or r.get("status") == "cancelled":
            continue
        finished += 1
        seen = r.get("t_last_ns") or r.get("t_first_ns")
        if seen and (last_seen_ns is None or seen > last_seen_ns):
            last_seen_ns = seen
        if r.get("status") != "ok":
            if r.get("error_kind") == CONTEXT_OVERFLOW:
                overflowed += 1
            else:
                failed += 1
            continue
        succeeded += 1
        complete += bool(r.get("t_first_ns") and r.get("prompt_tokens") is not None)
    counted = finished - overflowed
    if not counted:
        check("failed_ratio", False, "no profiled request finished", value=None)
    else:
        ratio_failed = failed / counted
        check("failed_ratio", ratio_failed <= profile.max_failed_ratio,
              f"{ratio_failed:.1%} of profiled requests failed, context overflows aside "
              f"(limit {profile.max_failed_ratio:.0%})", value=ratio_failed)
    # strictly above the limit fails, as the harness compares (environment.py)
    overflow = overflowed / finished if finished else 0.0
    check("context_overflow", overflow <= profile.max_context_overflow_ratio,
          f"{overflow:.1%} of profiled responses were context overflows (limit "
          f"{profile.max_context_overflow_ratio:.0%})", value=overflow)
    # of a duration-bound phase (a request-bound smoke run has no phase to cover: the
    # duration check already says it is not a submission)
    phased = bool(duration) and run.get("max_requests") is None
    if phased and first_send_ns is not None and last_seen_ns is not None:
        reach = min(1.0, (last_seen_ns - first_send_ns) / (duration * 1e9))
        check("metric_coverage", reach >= profile.min_phase_coverage,
              f"token observations reach {reach:.1%} of the profiling phase (minimum "
              f"{profile.min_phase_coverage:.0%})", value=reach)
    elif phased:
        check("metric_coverage", False, "no token observation in the profiling phase", value=0.0)
    # over the requests that succeeded: the failed ones are the failed ratio's business
    coverage = complete / succeeded if succeeded else 0.0
    check("request_metrics", coverage >= profile.min_request_coverage,
          f"{coverage:.1%} of the successful profiled requests carry first-token time and "
          f"server prompt tokens (minimum {profile.min_request_coverage:.0%})", value=coverage)
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
