"""`--profile agentx` (InferenceX AgentX v1.0): its settings applied where none is given, and
a submission_valid verdict with reasons, against the reference fast SSE server."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, TRACES

from kvbench.replay import ReplayConfig, run_replay
from kvbench.replay.profile import AGENTX_V1, replay_settings, verdict
from kvbench.workload.bounds import SessionPool
from kvbench.workload.loader import load_trace

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
    assert run["warmup_requests"] == 20 and run["start"] == "sampled"
    assert run["start_ratio"] == [0.25, 0.75] and run["think_time_cap_s"] == 300.0
    assert run["system_idle_cap_s"] == 10.0
    assert v["submission_valid"] is False
    assert v["checks"]["duration"]["passed"] is False  # 2 s < 900 s
    assert v["checks"]["fresh_server"]["passed"] is False  # --url: not known
    assert v["checks"]["trace_delays"]["passed"] is False  # --think-time-scale 0
    for name in ("warmup", "start", "idle_gap_cap", "system_idle_cap", "cache_bust",
                 "failed_ratio", "context_overflow", "request_metrics", "ignore_eos",
                 "input_truncation"):
        assert v["checks"][name]["passed"] is True, (name, v["checks"][name])
    assert any(r.startswith("duration: profiling duration 2 s (minimum 900 s") for r in
               v["reasons"])


S = 1_000_000_000  # ns


def _records(ok: int, failed: int, no_usage: int = 0, overflow: int = 0,
             reach: float = 1.0) -> list[dict]:
    """Profiled requests spread evenly over an hour's phase, the last token observed at
    `reach` of it; warm-up and cancelled records around them."""
    n = ok + no_usage
    good = [{"status": "ok", "t_send_ns": 1 + i * S, "t_first_ns": 2 + i * S,
             "t_last_ns": int(3600 * reach * S * (i + 1) / n), "prompt_tokens": 10}
            for i in range(n)]
    for r in good[ok:]:
        r["prompt_tokens"] = None
    return ([{"status": "ok", "is_warmup": True, "t_send_ns": 0}] * 5 + good
            + [{"status": "error", "error_kind": "http_500"} for _ in range(failed)]
            + [{"status": "error", "error_kind": "context_overflow"} for _ in range(overflow)]
            + [{"status": "cancelled"}] * 3)


def _run(**over) -> dict:
    base = {"duration_s": 3600.0, "elapsed_s": 3630.0, "max_requests": None, "concurrency": 4,
            "warmup_requests": 40, "start": "sampled",
            "start_ratio": [0.25, 0.75], "think_time_cap_s": 300.0, "run_marker": "ab12",
            "system_idle_cap_s": 10.0, "think_time_scale": 1.0, "max_input_tokens": None,
            "ignore_eos": True, "dropped_fields": []}
    return {**base, **over}


def test_a_canonical_run_is_valid():
    v = verdict(AGENTX_V1, _run(), _records(95, 5), fresh_server=True)
    assert v["submission_valid"] is True and v["reasons"] == []
    assert v["checks"]["failed_ratio"]["value"] == 0.05


def test_each_rule_fails_alone():
    cases = {
        "duration": (_run(duration_s=899.0), _records(100, 0)),
        "duration ": (_run(elapsed_s=1200.0), _records(100, 0)),
        "duration  ": (_run(max_requests=500), _records(100, 0)),
        "warmup": (_run(warmup_requests=39), _records(100, 0)),
        "start": (_run(start_ratio=[0.0, 1.0]), _records(100, 0)),
        "idle_gap_cap": (_run(think_time_cap_s=301.0), _records(100, 0)),
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
    }
    for name, (run, records) in cases.items():
        v = verdict(AGENTX_V1, run, records, fresh_server=True)
        failed = [n for n, c in v["checks"].items() if c["passed"] is False]
        assert failed == [name.strip()], (name, failed)
    assert verdict(AGENTX_V1, _run(), _records(100, 0), fresh_server=False)["reasons"] == [
        "fresh_server: the server served an earlier point"]


def test_context_overflows_are_not_failures_and_one_percent_is_allowed():
    """agentx-harness: overflows are left out of the failed ratio and gate validity on their
    own, strictly above 1% of the responses (environment.py `_AgentXSettings`)."""
    v = verdict(AGENTX_V1, _run(), _records(99, 9, overflow=1), fresh_server=True)
    assert v["submission_valid"] is True, v["reasons"]
    assert v["checks"]["failed_ratio"]["value"] == 9 / 108
    assert v["checks"]["context_overflow"]["value"] == 1 / 109
    v = verdict(AGENTX_V1, _run(), _records(98, 0, overflow=2), fresh_server=True)
    assert [r.split(":")[0] for r in v["reasons"]] == ["context_overflow"]


def test_settings_keep_what_the_user_gave():
    got = replay_settings(AGENTX_V1, 3, {"duration_s": 60.0, "warmup_requests": None,
                                         "start": None, "think_time_cap_s": 5.0,
                                         "system_idle_cap_s": None})
    assert got == {"warmup_requests": 30, "start": "sampled", "start_ratio": (0.25, 0.75),
                   "system_idle_cap_s": 10.0, "end_session_on_context_overflow": True}


def test_sampled_starts_fall_in_the_middle_half():
    sessions = load_trace(CLAUDE)
    pool = SessionPool(sessions, recycle=False, start="sampled", seed=3,
                       start_ratio=(0.25, 0.75))
    for lane in range(len(sessions)):
        session, _, start = pool.take(lane)
        n = session.num_turns
        assert int(0.25 * n) <= start <= max(int(0.25 * n), min(n - 1, int(0.75 * n)))


def test_replay_config_carries_the_profile(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=2, max_requests=8,
                       output_dir=tmp_path, trace=[CLAUDE], think_time_scale=0,
                       max_tokens_cap=4, block_tokens=4, profile="agentx", fresh_server=True)
    summary = run_replay(cfg)
    v = summary["profile"]
    assert v["profile"] == "agentx-v1" and v["checks"]["fresh_server"]["passed"] is True
    assert v["checks"]["duration"]["message"].startswith("a request-count bound")
