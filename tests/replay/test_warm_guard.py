"""The warm-cache guard end to end: a second run that reuses the first run's marker against
the same serve-sim meets the KV the first one left, and its result says so (valid: false)."""

from __future__ import annotations

from pathlib import Path

from fixtures.sim_server import REPO, serve_sim

from kvbench.replay import ReplayConfig, run_replay
from kvbench.results import build_result

TRACES = sorted((REPO / "src" / "kvbench" / "workload" / "data" / "claude-code").glob("*.gz"))


def _run(url: str, out: Path, marker: str) -> dict:
    cfg = ReplayConfig(url=url, model="llama-3.1-8b", trace=TRACES[:2], concurrency=2,
                       max_requests=4, max_tokens_cap=8, think_time_scale=0,
                       output_dir=out, run_marker=marker)
    return run_replay(cfg)


def _validity(summary: dict) -> dict:
    row = {"framework": "sim", "model": "llama-3.1-8b", "conc": 2, "kv-offloading": "none",
           "exp-name": "guard"}
    result = build_result(job_row=row, config_key="k", plan=None, summary=summary,
                          server=None, telemetry=None, status="ok", fingerprint="f")
    return result.validity


def test_a_reused_marker_meets_the_previous_runs_kv(tmp_path):
    with serve_sim(tmp_path / "server.log", "--time-scale", "50") as url:
        first = _run(url, tmp_path / "a", "same")
        fresh = _run(url, tmp_path / "b", "other")
        again = _run(url, tmp_path / "c", "same")
    assert first["warm_cache"]["passed"] is True
    assert fresh["warm_cache"]["passed"] is True  # a new marker isolates the run
    assert again["warm_cache"]["passed"] is False
    assert again["warm_cache"]["suspect_sessions"] == again["warm_cache"]["checked_sessions"]
    assert first["cache"]["ideal_hit_rate"] > 0  # the second turn extends the first
    stamp = _validity(again)
    assert stamp["valid"] is False
    assert stamp["checks"]["warm_cache"]["passed"] is False
    assert any(r.startswith("warm_cache: 2 of 2 sessions' first requests hit KV from before")
               for r in stamp["reasons"]), stamp["reasons"]
    # the engine hit more than the ceiling of what this run sent: the ceiling check agrees
    assert stamp["checks"]["ideal_cache"]["passed"] is False
    assert _validity(fresh)["checks"]["warm_cache"]["passed"] is True
