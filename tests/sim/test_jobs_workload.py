"""`simulate-jobs` on the default workload (issue 36 item 1, issue 39 item 3): the AgentX-shaped
corpus sized to each row, by AgentX's bounds, said in one line (and a shortened duration
said so); results that move with concurrency; the trace words; progress on a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "inferencex"
ROW = ["--config-files", str(DATA / "nvidia-master.yaml"), "--runner-config",
       str(DATA / "runners.yaml"), "--config-keys", "qwen3.5-fp8-h200-sglang-agentic-mtp"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvbench", "simulate-jobs", *ROW, *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def test_the_default_workload_is_the_corpus_sized_to_each_row_and_moves_with_conc() -> None:
    # a 600 s run of the four resident rows (conc 4-16): the duration shortened, and said
    res = _run("--duration", "600", "--format", "json", "--workers", "1", "--max-jobs", "4")
    assert res.returncode == 0, res.stderr
    first = res.stderr.splitlines()[1]  # after the --max-jobs line
    assert first.startswith("workload: the AgentX-shaped corpus sized to each row (at least "
                            "393 sessions, the row's context variant); 600 s a row (--duration; "
                            "AgentX runs 3600 s"), first
    assert "10 warm-up requests per lane, lanes starting at 25%-75% of a session" in first
    assert "simulate-jobs: 4/4 rows" in res.stderr  # progress, on a pipe too
    entries = json.loads(res.stdout)
    assert [e["conc"] for e in entries] == [4, 8, 12, 16]
    for e in entries:
        assert e["workload"] == {"sessions": 393, "duration-s": 600.0, "kind": "corpus"}
    arms = [e["arms"]["resident"] for e in entries]
    tok_s = [a["throughput"]["output_tok_s"] for a in arms]
    assert len(set(tok_s)) == 4 and tok_s[-1] > 2 * tok_s[0], tok_s
    assert len({a["ttft_ms"]["p50"] for a in arms}) == 4
    assert all(a["setup"]["bounds"]["start_ratio"] == [0.25, 0.75] for a in arms)
    assert all(a["setup"]["bounds"]["think_time_cap_s"] == 300.0 for a in arms)


def test_trace_words_and_lanes_beyond_the_sessions() -> None:
    res = _run("--trace", "synthetic", "--sessions", "6", "--bounds", "once", "--max-jobs",
               "2", "--workers", "1", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert "workload: 6 synthetic sessions (seed 0); each session once from its first turn" \
        in res.stderr
    assert "qwen3.5_tp8_conc8_kvnone_spec-mtp: 8 session lanes on 6 sessions: only 6 lanes " \
           "ever have a session" in res.stderr
    res = _run("--trace", "agentx", "--trace", "bundled")
    assert res.returncode == 2 and "stands alone" in res.stderr
    assert "Traceback" not in res.stderr


def test_simulate_and_replay_take_the_trace_words(capsys) -> None:
    from kvbench.cli import main
    from kvbench.cli.replay import _trace_paths
    from kvbench.workload.choice import bundled_traces

    assert _trace_paths("bundled") == bundled_traces() and len(bundled_traces()) == 8
    main(["simulate", "--trace", "bundled", "--concurrency", "12", "--format", "json"])
    err = capsys.readouterr().err
    assert "warning: simulate: 12 session lanes on 8 sessions: only 8 lanes ever have a " \
           "session" in err


def test_the_defaults_end_to_end_on_one_row() -> None:
    """No workload flag at all: the corpus and AgentX's hour, on the smallest row (conc 4)."""
    res = _run("--max-jobs", "1", "--workers", "1", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert "; 3600 s a row (AgentX's duration), 10 warm-up requests per lane" in res.stderr
    [entry] = json.loads(res.stdout)
    arm = entry["arms"]["resident"]
    assert entry["workload"] == {"sessions": 393, "duration-s": 3600.0, "kind": "corpus"}
    assert arm["warmup_requests"] >= 4 * 10 and arm["requests"] > 100
    assert arm["setup"]["bounds"]["duration_s"] == 3600.0
