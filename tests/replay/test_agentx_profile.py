"""`--profile agentx` (InferenceX AgentX v1.0 as agentx-harness 1.0.12 runs it): its settings
applied where none is given, and a submission_valid verdict with reasons, against the
reference fast SSE server."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, TRACES

from kvbench.replay import ReplayConfig, run_replay
from kvbench.replay.profile import AGENTX_V1, replay_settings, verdict
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.loader import load_trace
from kvbench.workload.tree import TreeRun, first_start, time_bounds_ms

CLAUDE = TRACES / "claude-code"


def test_a_short_run_says_it_is_not_a_submission(sse_server, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "replay", "--url", sse_server, "--trace",
         str(CLAUDE), "--output", str(tmp_path), "--concurrency", "2", "--duration", "2",
         "--max-tokens-cap", "4", "--block-tokens", "4", "--think-time-scale", "0",
         "--model", "fake-model", "--profile", "agentx"],
        capture_output=True, text=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin",
             "KVBENCH_NO_CACHE": "1"})
    assert out.returncode == 0, out.stderr
    assert "agentx-v1: not a valid submission" in out.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    run, v = summary["run"], summary["profile"]
    # the profile's settings where the command gave none
    assert run["warmup_per_lane"] == 10 and run["start"] == "sampled" and run["seed"] == 42
    assert run["start_ratio"] == [0.25, 0.75] and run["think_time_cap_s"] is None
    assert run["tree_idle_cap_s"] == 300.0 and run["system_idle_cap_s"] == 10.0
    # the warm-up came first (a t* request per lane, then 10 more per lane), then a 2 s phase
    assert summary["requests"]["warmup"] == 2 + 20
    assert run["warmup_s"] > 0 and run["profiling_started_ns"] < run["profiling_ended_ns"]
    assert v["submission_valid"] is False
    assert v["checks"]["duration"]["passed"] is False  # 2 s < 900 s
    assert v["checks"]["fresh_server"]["passed"] is False  # --url: not known
    assert v["checks"]["trace_delays"]["passed"] is False  # --think-time-scale 0
    # the bundled traces are not an AgentX corpus, whatever else the run does
    assert v["checks"]["corpus"]["passed"] is False
    assert run["corpus"]["agentx"] is False and len(run["corpus"]["fingerprint"]) == 64
    for name in ("warmup", "start", "idle_gap_cap", "system_idle_cap", "cache_bust",
                 "failed_ratio", "context_overflow", "request_metrics", "ignore_eos",
                 "input_truncation"):
        assert v["checks"][name]["passed"] is True, (name, v["checks"][name])
    assert v["checks"]["metric_coverage"]["passed"] is None  # below 900 s, not checked
    assert any(r.startswith("duration: profiling duration 2 s after the warm-up") for r in
               v["reasons"])


S = 1_000_000_000  # ns
PHASE = (1200 * S, 4800 * S)  # a 1,200 s warm-up, then the 3,600 s profiling phase


def _records(ok: int, failed: int, no_usage: int = 0, overflow: int = 0,
             reach: float = 1.0, phase: tuple[int, int] = PHASE) -> list[dict]:
    """Profiled requests spread evenly over the profiling phase, the last token observed at
    `reach` of it; warm-up requests before it and cancelled records around them."""
    start, end = phase
    n = ok + no_usage
    good = [{"status": "ok", "t_send_ns": start + i * S, "t_first_ns": start + i * S + 2,
             "t_last_ns": start + int((end - start) * reach * (i + 1) / n),
             "prompt_tokens": 10} for i in range(n)]
    for r in good[ok:]:
        r["prompt_tokens"] = None
    return ([{"status": "ok", "is_warmup": True, "t_send_ns": 0, "t_last_ns": start - S}] * 5
            + good + [{"status": "error", "error_kind": "http_500"} for _ in range(failed)]
            + [{"status": "error", "error_kind": "context_overflow"} for _ in range(overflow)]
            + [{"status": "cancelled"}] * 3)


AGENTX_CORPUS = {"name": "semianalysis_cc_traces_weka_062126", "fingerprint": "f" * 64,
                 "agentx": True, "reason": "fingerprint verified"}


def _run(**over) -> dict:
    base = {"duration_s": 3600.0, "max_requests": None, "concurrency": 4,
            "warmup_requests": 0, "warmup_per_lane": 10, "start": "sampled",
            "start_ratio": [0.25, 0.75], "think_time_cap_s": None, "tree_idle_cap_s": 300.0,
            "run_marker": "ab12", "system_idle_cap_s": 10.0, "think_time_scale": 1.0,
            "max_input_tokens": None, "ignore_eos": True, "dropped_fields": [],
            "corpus": AGENTX_CORPUS, "profiling_started_ns": PHASE[0],
            "deadline_ns": PHASE[1], "profiling_ended_ns": PHASE[1] + 30 * S}
    return {**base, **over}


def test_a_canonical_run_is_valid():
    v = verdict(AGENTX_V1, _run(), _records(95, 5), fresh_server=True)
    assert v["submission_valid"] is True and v["reasons"] == []
    assert v["checks"]["failed_ratio"]["value"] == 0.05


def test_each_rule_fails_alone():
    cases = {
        "duration": (_run(duration_s=899.0), _records(100, 0)),
        "duration ": (_run(profiling_ended_ns=PHASE[0] + 1200 * S), _records(100, 0)),
        "duration  ": (_run(max_requests=500), _records(100, 0)),
        "warmup": (_run(warmup_per_lane=9), _records(100, 0)),
        "warmup ": (_run(stopped="warm-up failed: a request of t1 (turn 3) failed"),
                    _records(100, 0)),
        "start": (_run(start_ratio=[0.0, 1.0]), _records(100, 0)),
        "idle_gap_cap": (_run(tree_idle_cap_s=301.0), _records(100, 0)),
        "idle_gap_cap ": (_run(think_time_cap_s=300.0), _records(100, 0)),
        "cache_bust": (_run(run_marker=None), _records(100, 0)),
        "failed_ratio": (_run(), _records(89, 11)),
        "request_metrics": (_run(), _records(94, 0, no_usage=6)),
        "system_idle_cap": (_run(system_idle_cap_s=None), _records(100, 0)),
        "trace_delays": (_run(think_time_scale=0.5), _records(100, 0)),
        "input_truncation": (_run(max_input_tokens=131072), _records(100, 0)),
        "ignore_eos": (_run(dropped_fields=["ignore_eos"]), _records(100, 0)),
        "ignore_eos ": (_run(ignore_eos=False), _records(100, 0)),
        # the server stopped answering half-way: every answered request is complete
        "metric_coverage": (_run(), _records(100, 0, reach=0.5)),
        "context_overflow": (_run(), _records(100, 0, overflow=2)),
        "corpus": (_run(corpus={"name": None, "agentx": False, "fingerprint": "a" * 64,
                                "reason": "local traces of no named corpus"}),
                   _records(100, 0)),
        # the embedded engine (a quickstart row, --stand-in sim): the rules shaped the
        # replay, but what answered is a simulation
        "engine": (_run(embedded_engine=True), _records(100, 0)),
    }
    for name, (run, records) in cases.items():
        v = verdict(AGENTX_V1, run, records, fresh_server=True)
        failed = [n for n, c in v["checks"].items() if c["passed"] is False]
        assert failed == [name.strip()], (name, failed)
    assert verdict(AGENTX_V1, _run(), _records(100, 0), fresh_server=False)["reasons"] == [
        "fresh_server: the server served an earlier point"]


def test_the_failed_ratio_is_what_inferencex_validates_from_the_harness_export():
    """InferenceX utils/agentic/validation/validate_agentic_result.py:61-80 takes
    error_request_count / (request_count + error_request_count) from the harness's export,
    where an agentic-replay run keeps context overflows out of both counts (agentx-harness
    1.0.12 record_processor_service.py:339-351, records_manager.py:831-846); overflows gate
    validity on their own, strictly above 1% of all responses (environment.py
    `_AgentXSettings`). tests/replay/test_agentx_oracle.py measures both on the harness."""
    v = verdict(AGENTX_V1, _run(), _records(99, 9, overflow=1), fresh_server=True)
    assert v["checks"]["failed_ratio"]["value"] == 9 / 108
    assert v["checks"]["context_overflow"]["value"] == 1 / 109
    assert v["submission_valid"] is True, v["reasons"]
    v = verdict(AGENTX_V1, _run(), _records(98, 0, overflow=2), fresh_server=True)
    assert [r.split(":")[0] for r in v["reasons"]] == ["context_overflow"]
    assert v["checks"]["failed_ratio"]["value"] == 0


def test_a_server_that_stops_before_the_end_of_the_profiling_phase_is_not_valid():
    """Issue 34's constructed run: a 1,200 s warm-up inside a 3,600 s run (the profiling
    phase is its last 2,400 s) and a server that stops answering 160 s before the end. Token
    observations reach 93.3% of the profiling phase: not a submission, citing coverage. The
    old baseline (the first warm-up send) saw (3,600 - 160) / 3,600 = 95.6% and passed it."""
    phase = (1200 * S, 3600 * S)
    run = _run(profiling_started_ns=phase[0], deadline_ns=phase[1],
               profiling_ended_ns=phase[1] + 30 * S, duration_s=2400.0)
    stop_at = phase[1] - 160 * S
    records = _records(100, 0, reach=(stop_at - phase[0]) / (phase[1] - phase[0]),
                       phase=phase)
    v = verdict(AGENTX_V1, run, records, fresh_server=True)
    assert v["submission_valid"] is False
    assert [r.split(":")[0] for r in v["reasons"]] == ["metric_coverage"]
    cov = v["checks"]["metric_coverage"]
    assert round(cov["value"], 3) == round(2240 / 2400, 3)
    assert "stopped answering 160 s before its end" in cov["message"]
    old_baseline = (stop_at - 0) / (3600 * S)
    assert old_baseline >= AGENTX_V1.min_phase_coverage  # what the old check accepted
    # a summary written before the phase was recorded: its first profiled send starts it
    legacy = {k: v for k, v in run.items() if k not in ("profiling_started_ns", "deadline_ns",
                                                      "profiling_ended_ns")}
    legacy["duration_s"] = 3600.0
    v = verdict(AGENTX_V1, legacy, records, fresh_server=True)
    assert v["checks"]["metric_coverage"]["passed"] is False


def test_settings_keep_what_the_user_gave():
    got = replay_settings(AGENTX_V1, 3, {"duration_s": 60.0, "warmup_per_lane": None,
                                         "start": None, "think_time_cap_s": 5.0,
                                         "system_idle_cap_s": None, "seed": 7})
    assert got == {"warmup_per_lane": 10, "warmup_grace_s": 1800.0, "start": "sampled",
                   "start_ratio": (0.25, 0.75), "tree_idle_cap_s": 300.0,
                   "system_idle_cap_s": 10.0, "end_session_on_context_overflow": True}
    got = replay_settings(AGENTX_V1, 3, {})
    assert got["seed"] == 42 and got["think_time_cap_s"] is None
    assert got["duration_s"] == 3600.0


def test_sampled_starts_fall_in_the_middle_half_of_each_recording():
    """t* is uniform in 25-75% of the tree's recorded time span (trajectory_source.py
    `_build_timestamped_trajectory`); every stream resumes at its first request at or after
    t*, the one before it being its warm-up request."""
    bounds = WorkloadBounds(think_time_cap_s=None)
    for lane, session in enumerate(load_trace(CLAUDE)):
        run = TreeRun(session, bounds.shaped, bounds.think_s)
        lo, hi = time_bounds_ms(run)
        got = first_start(run, (0.25, 0.75), 42, lane, 10.0)
        if got is None:
            continue
        resume, warm = got
        # the root, or where it ended before t* a chain split off it that runs on
        s, (pos, offset) = min(resume.streams.items())
        t_next = session.turns[run.streams[s].turns[pos]].t_s
        t_star = t_next - offset
        assert lo + 0.25 * (hi - lo) <= t_star * 1000 <= lo + 0.75 * (hi - lo) + 1e-6
        for w in warm:
            assert session.turns[w.k].t_s < t_star and w.lead_s <= 10.0
        assert [w.stream for w in warm if w.stream == s] == ([s] if pos else [])


def test_replay_config_carries_the_profile(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=2, max_requests=8,
                       output_dir=tmp_path, trace=[CLAUDE], think_time_scale=0,
                       max_tokens_cap=4, block_tokens=4, profile="agentx", fresh_server=True)
    summary = run_replay(cfg)
    v = summary["profile"]
    assert v["profile"] == "agentx-v1" and v["checks"]["fresh_server"]["passed"] is True
    assert v["checks"]["duration"]["message"].startswith("a request-count bound")
