"""Which corpus a run replays (issue 34 item 3): the name and a content fingerprint recorded
in every result, an AgentX submission only for a pinned corpus whose fingerprint matches; and
the trace-level context filter (InferenceX's --max-context-length)."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES

from kvbench.errors import WorkloadError
from kvbench.workload import SyntheticSpec, generate_sessions, identity, load_trace
from kvbench.workload.bounds import SessionPool, WorkloadBounds

SMALL = TRACES / "agentx-small"


def test_the_fingerprint_is_of_the_content_not_the_files(tmp_path):
    plain = load_trace(SMALL)
    for p in sorted(SMALL.glob("*.json")):  # the same traces, gzipped
        (tmp_path / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
    assert identity.fingerprint(load_trace(tmp_path)) == identity.fingerprint(plain)
    changed = json.loads((SMALL / "oracle_000.json").read_text())
    changed["requests"][0]["out"] += 1
    (tmp_path / "oracle_000.json.gz").write_bytes(gzip.compress(json.dumps(changed).encode()))
    assert identity.fingerprint(load_trace(tmp_path)) != identity.fingerprint(plain)


def test_bundled_local_and_synthetic_traces_are_never_an_agentx_corpus(tmp_path):
    bundled = identity.identify([TRACES / "claude-code"], load_trace(TRACES / "claude-code"))
    assert bundled["agentx"] is False and bundled["name"] is None
    assert "no named corpus" in bundled["reason"]
    synthetic = identity.identify(None, generate_sessions(SyntheticSpec(num_sessions=2)))
    assert synthetic["agentx"] is False and synthetic["name"] == "synthetic"
    # a directory laid out like the HuggingFace cache of the AgentX corpus is named for it,
    # and still not a submission: its fingerprint is not the pinned one (none is pinned yet)
    hf = tmp_path / "datasets--semianalysisai--cc-traces-weka-062126" / "snapshots" / "abc"
    hf.mkdir(parents=True)
    for p in SMALL.glob("*.json"):
        (hf / p.name).write_bytes(p.read_bytes())
    got = identity.identify([hf], load_trace(hf))
    assert got["name"] == "semianalysis_cc_traces_weka_062126" and got["agentx"] is False
    assert "no fingerprint is pinned" in got["reason"]
    named = identity.identify([SMALL], load_trace(SMALL), "not_a_corpus")
    assert named["agentx"] is False and "not one of the AgentX corpora" in named["reason"]


def test_a_pinned_fingerprint_makes_the_corpus_a_submission(monkeypatch):
    sessions = load_trace(SMALL)
    corpora = {"semianalysis_cc_traces_weka_062126": {
        "dataset": "semianalysisai/cc-traces-weka-062126",
        "fingerprint": identity.fingerprint(sessions)}}
    monkeypatch.setattr(identity, "agentx_corpora", lambda: corpora)
    got = identity.identify([SMALL], sessions, "semianalysis_cc_traces_weka_062126")
    assert got["agentx"] is True, got["reason"]


def test_whole_traces_over_the_context_are_left_out():
    """InferenceX passes --max-context-length (benchmark_lib.sh build_replay_cmd): traces
    whose peak prompt + output exceeds it are dropped whole (agentx-harness weka_trace.py
    `_trace_peak_context_length`), never single turns."""
    sessions = load_trace(SMALL)
    peaks = sorted(s.peak_context_tokens() for s in sessions)
    limit = peaks[1]  # two traces fit
    pool = SessionPool.for_bounds(sessions, WorkloadBounds(max_context_tokens=limit))
    assert len(pool.sessions) == 2 and pool.dropped == len(sessions) - 2
    assert all(len(s.turns) == len(o.turns) for s in pool.sessions for o in sessions
               if o.session_id == s.session_id)
    with pytest.raises(WorkloadError, match="drops every session"):
        SessionPool.for_bounds(sessions, WorkloadBounds(max_context_tokens=peaks[0] - 1))
