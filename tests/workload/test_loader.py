from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES

from kvbench.errors import WorkloadError
from kvbench.workload import load_trace


def test_real_claude_code_directory_loads_every_session():
    sessions = load_trace(TRACES / "claude-code")
    assert len(sessions) == 100
    assert sum(s.num_turns for s in sessions) == 4524
    t = sessions[0].turns[0]
    # blocks cover floor(in / 64) tokens; the rest is an unhashed tail
    assert 0 <= t.input_tokens - 64 * len(t.hash_ids) < 64
    assert all(s.namespace == s.session_id for s in sessions)  # hash_id_scope: local


def test_real_mooncake_rows_chain_into_conversations():
    sessions = load_trace(TRACES / "mooncake" / "synthetic_trace.jsonl.gz")
    assert sum(s.num_turns for s in sessions) == 3993
    multi = [s for s in sessions if s.num_turns > 1]
    assert multi
    for s in multi:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            assert b.hash_ids[: len(a.hash_ids)] == a.hash_ids
            assert b.think_time_s >= 0 and b.block_tokens == 512


def _session(requests: list) -> dict:
    return {"id": "t1", "block_size": 64, "hash_id_scope": "local", "requests": requests}


def test_subagent_requests_are_replayed_inline(tmp_path):
    reqs = [
        {"t": 0, "type": "n", "in": 130, "out": 10, "hash_ids": [1, 2], "think_time": 0},
        {"t": 5, "type": "subagent", "agent_id": "explore_000_abcd1234", "think_time": 2.5,
         "requests": [
             {"t": 0, "type": "n", "in": 70, "out": 5, "hash_ids": [1]},
             {"t": 1, "type": "s", "in": 140, "out": 5, "hash_ids": [1, 9], "think_time": 1},
         ]},
        {"t": 9, "type": "n", "in": 200, "out": 20, "hash_ids": [1, 2, 3], "think_time": 3},
    ]
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(_session(reqs)) + "\n").encode()))
    (s,) = load_trace(path)
    assert [t.agent for t in s.turns] == [None, "explore_000_abcd1234", "explore_000_abcd1234",
                                          None]
    assert s.turns[1].think_time_s == 2.5 and s.turns[2].think_time_s == 1


@pytest.mark.parametrize(
    ("request_obj", "needle"),
    [
        ({"type": "n", "out": 1, "hash_ids": []}, "requests[0].in is missing"),
        ({"type": "x", "in": 1, "out": 1, "hash_ids": []}, "requests[0].type = 'x'"),
        ({"type": "n", "in": 10, "out": 1, "hash_ids": [1, 2]}, "more than in = 10"),
        ({"type": "n", "in": 64, "out": 1, "hash_ids": ["a"]}, "hash_ids[0] = 'a'"),
    ],
)
def test_bad_sessions_name_file_line_and_field(tmp_path, request_obj, needle):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(_session([{"type": "n", "in": 64, "out": 1, "hash_ids": [1]}]))
    path.write_text(good + "\n" + json.dumps(_session([request_obj])) + "\n")
    with pytest.raises(WorkloadError) as e:
        load_trace(path)
    assert f"{path}:2" in str(e.value) and needle in str(e.value)


def test_bad_mooncake_row_and_bad_json(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n'
                    '{"timestamp": 5, "input_length": -3, "output_length": 1}\n')
    with pytest.raises(WorkloadError, match=r"m.jsonl:2: field input_length = -3"):
        load_trace(path)
    path.write_text('{"timestamp": 0,\n')
    with pytest.raises(WorkloadError, match=r"m.jsonl:1: invalid JSON"):
        load_trace(path)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(WorkloadError, match="no such trace file"):
        load_trace(tmp_path / "nope")
    with pytest.raises(WorkloadError, match="no trace files"):
        load_trace(tmp_path)
