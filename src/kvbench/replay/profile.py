"""Validity profiles: the rules a replay must follow for its result to be publishable, as data
with their sources, applied to a run's settings before it starts and checked against what it
did after.

`agentx-v1`: InferenceX AgentX v1.0 as agentx-harness 1.0.12 runs it (its `agentx` scenario:
aiperf/common/scenario/inferencex_agentx_mvp.py:43-70 `AGENTX`, validated by
aiperf/common/scenario/validator.py `apply_scenario`) with the flags InferenceX passes
(843c6254f benchmarks/benchmark_lib.sh `build_replay_cmd`) and its result gate
(utils/agentic/validation/validate_agentic_result.py):
- a profiling phase of 3600 s by default, never below 900 s (`min_benchmark_duration_seconds`),
  counted after the warm-up; a request-count bound is no profiling phase;
- the warm-up of replay/warmup.py: each lane's first tree at a sampled instant t* in 25-75% of
  its recording, its live streams' previous requests with their history, then 10 one-token
  requests per lane with no idle delay (`--warmup-requests-per-lane 10`); a failed root
  request of the warm-up ends the run;
- recorded delays honoured (`forbid_ignore_trace_delays`), no cap on a single delay
  (`forbid_inter_turn_delay_cap`), a tree's idle time capped at 300 s
  (`--trace-idle-gap-cap-seconds 300`) and the whole system's at 10 s
  (`system_idle_gap_cap_seconds=10.0`, locked);
- subagents alongside their parent: concurrency counts live session trees (workload/tree.py);
- no client-side input truncation (`forbid_input_truncation`), ignore_eos=true, streaming;
  whole traces over the server's context may be left out up front (`--max-context-length`);
- the first-turn prefix cache-busted per trace replay (`require_cache_bust`);
- the corpus one of the harness's pinned ones (`require_loader`; workload/identity.py):
  bundled, local or synthetic traces are never a submission;
- at most 10% failed requests, `error_request_count / (request_count + error_request_count)`
  (validate_agentic_result.py:61-80) over what the harness exports: under an agentic-replay
  scenario a context overflow is in neither count (record_processor_service.py:339-351 flags
  it `context_overflow_skip`, records_manager.py:831-846 counts it apart as
  `skipped_context_overflow_count`; measured: 1 overflow among 31 profiled responses gave
  `request_count` 30, no `error_request_count`), so overflows are out of both sides; they
  gate validity on their own, strictly above 1% of all responses (environment.py
  `_AgentXSettings`, `context_overflow_rate_exceeded`);
- first-token or inter-token observations reaching through at least 95% of the profiling
  phase (`minimum_profile_metric_coverage_ratio`, aiperf/records/records_manager.py
  `_validate_profile_metric_duration_coverage`: not checked below the 900 s minimum);
- a fresh server deployment per concurrency point; seed 42 (InferenceX's `--random-seed 42`);
- a chat request's history as the harness's system / user / assistant messages over the
  trace's blocks (aiperf/dataset/loader/weka_synth_buf.py; workload/messages.py).
kvbench adds two of its own: a run the embedded engine served (`kvbench serve-sim`, or
`--stand-in sim`) is a simulation, never a submission, whatever else it follows; and at
least 95% of the successful profiled requests must carry complete metrics (first-token time
and the server's prompt-token count), since a result computed from a minority of requests is
not the run's.

kvbench's replay busts caches per pass: a recycled trajectory replays in a fresh hash
namespace (workload/bounds.py), and every prompt starts with a per-run marker
(workload/prompt.py), so no replay can warm another's first-turn prefix. Under this profile a
chat request carries the harness's marker instead: `[rid:<12 hex>]` opening the first user
message, one per session tree (timing/strategies/cache_bust.py, workers/worker.py
`_apply_cache_bust`), so the system message before it is shared across trees and passes as
the harness shares it."""

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
    warmup_grace_s: float
    start_ratio: tuple[float, float]
    tree_idle_cap_s: float  # when none of a tree's requests is in flight
    system_idle_cap_s: float  # when nothing is in flight anywhere
    seed: int
    max_failed_ratio: float
    max_context_overflow_ratio: float
    min_phase_coverage: float  # of the profiling phase reached by token observations
    min_request_coverage: float  # kvbench's own: successful requests with complete metrics
    fresh_server_per_concurrency: bool
    # a chat prompt as the harness's role segments (workload/messages.py), not one message
    chat_segments: bool = False
    # ... opened by the harness's cache-bust marker, one per session tree, in place of
    # kvbench's run marker (workload/prompt.py `tree_marker`)
    tree_marker: bool = False


AGENTX_V1 = ValidityProfile(
    name="agentx-v1",
    source="agentx-harness 1.0.12 aiperf/common/scenario/inferencex_agentx_mvp.py:7-70, "
           "validator.py, aiperf/timing/strategies/agentic_replay.py, "
           "aiperf/common/environment.py _AgentXSettings; InferenceX 843c6254f "
           "benchmarks/benchmark_lib.sh build_replay_cmd, "
           "utils/agentic/validation/validate_agentic_result.py",
    default_duration_s=3600.0,  # inferencex_agentx_mvp.py:46
    min_duration_s=900.0,  # :32
    warmup_requests_per_lane=10,  # :55; benchmark_lib.sh AIPERF_WARMUP_REQUESTS_PER_LANE
    warmup_grace_s=1800.0,  # :56
    start_ratio=(0.25, 0.75),  # :47-48; benchmark_lib.sh --trajectory-start-*-ratio
    tree_idle_cap_s=300.0,  # :57; benchmark_lib.sh AIPERF_TRACE_IDLE_GAP_CAP_SECONDS
    system_idle_cap_s=10.0,  # :36
    seed=42,  # :53; benchmark_lib.sh --random-seed 42
    max_failed_ratio=0.10,  # :54; benchmark_lib.sh AIPERF_FAILED_REQUEST_THRESHOLD
    max_context_overflow_ratio=0.01,  # environment.py CONTEXT_OVERFLOW_RATE_LIMIT
    min_phase_coverage=0.95,  # :39
    min_request_coverage=0.95,
    fresh_server_per_concurrency=True,
    # weka_synth_buf.py ConversationReconstructor, sent as DELTAS_WITH_RESPONSES
    # (workers/session_manager.py:126-148)
    chat_segments=True,
    # --cache-bust first_turn_prefix (:38 require_cache_bust), timing/strategies/cache_bust.py
    tree_marker=True,
)

PROFILES = {"agentx": AGENTX_V1, AGENTX_V1.name: AGENTX_V1}
# what `kvbench run` replays a row with an InferenceX exp-name under when no --profile is
# given: the workload InferenceX publishes it with (sweep/options.py RunOptions.for_row)
DEFAULT_PROFILE = AGENTX_V1
# `--profile none`: kvbench's own replay settings and no verdict (`kvbench run` otherwise
# replays an InferenceX row under AgentX by default)
NO_PROFILE = "none"


def chat_prompts(profile: str | None, chat: bool) -> tuple[bool, bool]:
    """(the harness's role segments, its cache-bust marker per session tree) for a replay
    under `profile` on the chat endpoint or not: the one decision the replay's prompts
    (replay/lanes.py) and a job's identity (sweep/options.py `cache_bust`) both take."""
    chosen = PROFILES.get(profile) if profile is not None else None
    segments = chat and chosen is not None and chosen.chat_segments
    return segments, segments and chosen.tree_marker


def profile_named(name: str, also: tuple[str, ...] = ()) -> ValidityProfile:
    """The profile `name` stands for; an unknown name is refused, naming the allowed ones
    (`also`: other values the option takes)."""
    from kvbench.errors import ReplayOptionError

    try:
        return PROFILES[name]
    except KeyError:
        raise ReplayOptionError(f"--profile {name!r} is not a validity profile (allowed: "
                                f"{', '.join(sorted([*PROFILES, *also]))})") from None


def profile_choice(name: str) -> str:
    """The profile `name` stands for, by its full name (agentx -> agentx-v1: a job file
    pins the version it ran), or NO_PROFILE; an unknown name is refused."""
    return NO_PROFILE if name == NO_PROFILE else profile_named(name, (NO_PROFILE,)).name


def replay_settings(profile: ValidityProfile, concurrency: int, given: dict[str, Any]
                    ) -> dict[str, Any]:
    """The replay settings the profile asks for, where the user gave none (`given`: the
    option values the user set, by ReplayConfig field name). An explicit value wins and is
    judged afterwards: a short smoke run says it is not a submission instead of refusing."""
    del concurrency  # the warm-up is per lane
    wanted = {
        "duration_s": profile.default_duration_s,
        "warmup_per_lane": profile.warmup_requests_per_lane,
        "warmup_grace_s": profile.warmup_grace_s,
        "start": "sampled",
        "start_ratio": profile.start_ratio,
        "tree_idle_cap_s": profile.tree_idle_cap_s,
        "system_idle_cap_s": profile.system_idle_cap_s,
        "seed": profile.seed,
        "end_session_on_context_overflow": True,
    }
    out = {k: v for k, v in wanted.items() if given.get(k) is None}
    if given.get("think_time_cap_s") is None:
        out["think_time_cap_s"] = None  # no cap on one delay: the tree's idle cap instead
    return out


def verdict(profile: ValidityProfile, run: dict[str, Any], records: Iterable[dict[str, Any]],
            fresh_server: bool | None) -> dict[str, Any]:
    """{profile, submission_valid, reasons, checks} of one replay: `run` is the summary's
    run block, `records` the requests, `fresh_server` whether the server was started for this
    concurrency point alone (None: not known, as with `kvbench replay --url`)."""
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, passed: bool | None, message: str, **detail: Any) -> None:
        checks[name] = {"passed": passed, "message": message, **detail}

    _settings(profile, run, check)
    _outcome(profile, run, records, check)
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


def _settings(profile: ValidityProfile, run: dict[str, Any], check) -> None:
    """The rules a run's settings follow (or not), before what it measured."""
    duration = run.get("duration_s")
    phase_s = _phase_s(run)
    if duration is None or run.get("max_requests") is not None:
        check("duration", False, "a request-count bound, not a profiling duration; AgentX "
              f"profiles for a duration >= {profile.min_duration_s:g} s", value=duration)
    elif phase_s is not None and phase_s < duration * 0.999:
        check("duration", False, f"the profiling phase ended after {phase_s:.0f} s of its "
              f"{duration:g} s ({run.get('stopped') or 'every trace used up'})", value=phase_s)
    else:
        check("duration", duration >= profile.min_duration_s,
              f"profiling duration {duration:g} s after the warm-up (minimum "
              f"{profile.min_duration_s:g} s, default {profile.default_duration_s:g} s)",
              value=duration)
    per_lane = run.get("warmup_per_lane")
    stopped = str(run.get("stopped") or "")
    if stopped.startswith("warm-up"):
        check("warmup", False, f"the run ended in its warm-up: {stopped}")
    else:
        need = profile.warmup_requests_per_lane
        check("warmup", run.get("start") == "sampled" and (per_lane or 0) >= need,
              f"warm-up: t* requests {'sent' if run.get('start') == 'sampled' else 'not sent'}"
              f", then {per_lane or 0} one-token requests per lane (AgentX: {need})",
              value=per_lane)
    ratio = run.get("start_ratio")
    lo, hi = profile.start_ratio
    ok_start = run.get("start") == "sampled" and ratio is not None and tuple(
        ratio) == profile.start_ratio
    check("start", ok_start, f"lanes start at {run.get('start') or 'the beginning'}"
          + (f" in {ratio[0]:.0%}-{ratio[1]:.0%} of each trace" if ratio else "")
          + f" (AgentX: an instant t* in {lo:.0%}-{hi:.0%} of the recording)")
    tree_cap, turn_cap = run.get("tree_idle_cap_s"), run.get("think_time_cap_s")
    check("idle_gap_cap", tree_cap == profile.tree_idle_cap_s and turn_cap is None,
          f"a tree's idle time capped at {tree_cap} s, one delay at {turn_cap} s (AgentX: "
          f"{profile.tree_idle_cap_s:g} s per tree, no cap on one delay)", value=tree_cap)
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
    busted = {"tree": "first-turn prefixes busted per session tree (the harness's "
                      "[rid:...] marker opening the first user message)",
              "run": "first-turn prefixes busted per replay (per-run marker, fresh namespace "
                     "per pass)"}[run.get("cache_bust") or "run"]
    check("cache_bust", bool(run.get("run_marker")), busted
          if run.get("run_marker") else "no run marker: replays may share cached prefixes")
    corpus = run.get("corpus") or {}
    check("corpus", bool(corpus.get("agentx")), corpus.get("reason") or
          "the corpus the traces are was not recorded", corpus=corpus.get("name"),
          fingerprint=corpus.get("fingerprint"))
    if run.get("embedded_engine"):
        # the row's rules still shape the replay; what answered is a model of the engine
        check("engine", False, "kvbench's embedded engine served (a simulation of the "
              "engine, not a measurement of it)")


def _phase_s(run: dict[str, Any]) -> float | None:
    start, end = run.get("profiling_started_ns"), run.get("profiling_ended_ns")
    return (end - start) / 1e9 if start and end else None


def _outcome(profile: ValidityProfile, run: dict[str, Any], records: Iterable[dict[str, Any]],
             check) -> None:
    """What the profiled requests say: failures, overflows, metric coverage."""
    # one pass over the records (a stream: an hour's replay is not held in memory)
    ok = failed = overflowed = complete = 0
    first_send_ns = first_profiled_ns = last_seen_ns = None
    for r in records:
        sent = r.get("t_send_ns")
        if sent and (first_send_ns is None or sent < first_send_ns):
            first_send_ns = sent
        if r.get("is_warmup") or r.get("status") == "cancelled":
            continue
        if sent and (first_profiled_ns is None or sent < first_profiled_ns):
            first_profiled_ns = sent
        seen = r.get("t_last_ns") or r.get("t_first_ns")
        if seen and (last_seen_ns is None or seen > last_seen_ns):
            last_seen_ns = seen
        if r.get("status") != "ok":
            if r.get("error_kind") == CONTEXT_OVERFLOW:
                overflowed += 1
            else:
                failed += 1
            continue
        ok += 1
        complete += bool(r.get("t_first_ns") and r.get("prompt_tokens") is not None)
    counted = ok + failed  # the harness's request_count + error_request_count
    if not counted:
        check("failed_ratio", False, "no profiled request finished", value=None)
    else:
        ratio_failed = failed / counted
        check("failed_ratio", ratio_failed <= profile.max_failed_ratio,
              f"{failed}/{counted} = {ratio_failed:.1%} of profiled requests failed, context "
              f"overflows aside as the harness exports them (limit "
              f"{profile.max_failed_ratio:.0%})", value=ratio_failed)
    # of every response, strictly above the limit fails, as the harness compares
    completed = counted + overflowed
    overflow = overflowed / completed if completed else 0.0
    check("context_overflow", overflow <= profile.max_context_overflow_ratio,
          f"{overflow:.1%} of profiled responses were context overflows (limit "
          f"{profile.max_context_overflow_ratio:.0%})", value=overflow)
    _coverage(profile, run, first_send_ns, first_profiled_ns, last_seen_ns, check)
    # over the requests that succeeded: the failed ones are the failed ratio's business
    coverage = complete / ok if ok else 0.0
    check("request_metrics", coverage >= profile.min_request_coverage,
          f"{coverage:.1%} of the successful profiled requests carry first-token time and "
          f"server prompt tokens (minimum {profile.min_request_coverage:.0%})", value=coverage)


def _coverage(profile: ValidityProfile, run: dict[str, Any], first_send_ns: int | None,
              first_profiled_ns: int | None, last_seen_ns: int | None, check) -> None:
    """How far token observations reach into the profiling phase: from its start (after the
    warm-up) to its planned end. A summary written before kvbench recorded the phase
    (no `profiling_started_ns`) has its phase begin at its first profiled request and end its
    duration after its first request, as those runs counted it."""
    duration = run.get("duration_s")
    if not duration or run.get("max_requests") is not None:
        return  # no phase to cover: the duration check says it is not a submission
    if duration < profile.min_duration_s:
        check("metric_coverage", None, f"not checked for a phase below "
              f"{profile.min_duration_s:g} s (as the harness skips it)")
        return
    start = run.get("profiling_started_ns") or first_profiled_ns
    end = run.get("deadline_ns") or (
        first_send_ns + int(duration * 1e9) if first_send_ns is not None else None)
    if start is None or end is None or last_seen_ns is None or end <= start:
        check("metric_coverage", False, "no token observation in the profiling phase",
              value=0.0)
        return
    reach = min(1.0, max(0.0, (last_seen_ns - start) / (end - start)))
    check("metric_coverage", reach >= profile.min_phase_coverage,
          f"token observations reach {reach:.1%} of the profiling phase (minimum "
          f"{profile.min_phase_coverage:.0%}: the server stopped answering "
          f"{(end - last_seen_ns) / 1e9:.0f} s before its end)" if reach <
          profile.min_phase_coverage else f"token observations reach {reach:.1%} of the "
          f"profiling phase (minimum {profile.min_phase_coverage:.0%})", value=reach)
