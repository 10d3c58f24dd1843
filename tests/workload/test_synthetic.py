from __future__ import annotations

import math
import statistics

from kvbench.workload import SyntheticSpec, generate_sessions


def test_seeded_and_deterministic():
    a = generate_sessions(SyntheticSpec(num_sessions=5, seed=3))
    b = generate_sessions(SyntheticSpec(num_sessions=5, seed=3))
    assert [t for s in a for t in s.turns] == [t for s in b for t in s.turns]
    c = generate_sessions(SyntheticSpec(num_sessions=5, seed=4))
    assert [t for s in a for t in s.turns] != [t for s in c for t in s.turns]


def test_defaults_reproduce_the_fitted_claude_code_shape():
    sessions = generate_sessions(SyntheticSpec(num_sessions=300, subagent_prob=0.0))
    turns = [s.num_turns for s in sessions]
    outs = [t.output_tokens for s in sessions for t in s.turns]
    # medians of the real traces: 34.5 turns, 211 output tokens (lognormal medians e^mu)
    assert 0.7 * math.exp(3.431) < statistics.median(turns) < 1.3 * math.exp(3.431)
    assert 0.8 * math.exp(5.562) < statistics.median(outs) < 1.2 * math.exp(5.562)
    for s in sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            # context grows turn by turn, sharing the previous prefix (bar compactions)
            if b.input_tokens > a.input_tokens:
                assert b.hash_ids[: len(a.hash_ids)] == a.hash_ids
    # one system + tool prefix shared by every session
    first_blocks = {s.turns[0].hash_ids[:200] for s in sessions}
    assert len(first_blocks) == 1


def test_subagents_fork_from_the_shared_prefix():
    sessions = generate_sessions(SyntheticSpec(num_sessions=20, subagent_prob=0.3))
    sub = [t for s in sessions for t in s.turns if t.agent]
    assert sub
    prefix = sessions[0].turns[0].hash_ids[:200]
    assert all(t.hash_ids[:200] == prefix for t in sub)
