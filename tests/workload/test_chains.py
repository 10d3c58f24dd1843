"""The weka loader builds the trees agentx-harness 1.0.12 replays, flat-chain splitting
included (`workload/chains.py`): its own reconstruction of the bundled traces
(tests/data/agentx_trees/, written by benchmarks/agentx_trees.py with the harness's Python)
is the oracle: the same streams (root main chain, subagent chains, detected flat chains),
each with the same requests in the same order and the same end-to-start delays, spawned by
the same root request, joined by the same root request, each first request at the same
offset from its branch's start, and each request waiting for the same requests of the
agent's other streams (the harness's replay barriers)."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import DATA, TRACES

from kvbench.workload.chains import Call, partition, split_preamble
from kvbench.workload.loader import load_trace
from kvbench.workload.weka import harness_stream_id

GOLDEN = DATA / "agentx_trees"


def _harness_view(convs: list[dict]) -> dict:
    """The harness's conversations of one trace, as comparable data."""
    by_branch = {b["id"]: b for c in convs for b in c["branches"]}
    streams = {c["id"]: [(round(t["t_ms"], 3), t["in"],
                          None if k == 0 else round(t["delay_ms"], 3))
                         for k, t in enumerate(c["turns"])] for c in convs}
    after = {(c["id"], k): sorted(map(tuple, t["after"]))
             for c in convs for k, t in enumerate(c["turns"]) if t["after"]}
    root = convs[0]
    spawns, joins, offsets = {}, {}, {}
    for p, t in enumerate(root["turns"]):
        for b in t["spawns"]:
            for child in by_branch[b]["children"]:
                spawns[child] = p
                offsets[child] = round(streams[child][0][0] - by_branch[b]["start_ms"], 3)
        for b in t["joins"]:
            for child in by_branch[b]["children"]:
                joins[child] = p
    return {"streams": streams, "spawns": spawns, "joins": joins, "offsets": offsets,
            "after": after}


def _kvbench_view(session) -> dict:
    turns = session.turns
    branches = session.tree()
    owned = {k for b in branches for k in range(b.first, b.end)}
    root = [k for k in range(len(turns)) if k not in owned]
    pos = {k: p for p, k in enumerate(root)}

    def stream(ks: list[int]) -> list:
        return [(round(turns[k].t_s * 1000, 3), turns[k].input_tokens,
                 None if i == 0 else round(turns[k].think_time_s * 1000, 3))
                for i, k in enumerate(ks)]

    streams = {session.session_id: stream(root)}
    where = {k: (session.session_id, p) for p, k in enumerate(root)}
    spawns, joins, offsets = {}, {}, {}
    for b in branches:
        sid = harness_stream_id(session.session_id, b.agent)
        where.update({k: (sid, k - b.first) for k in range(b.first, b.end)})
        streams[sid] = stream(list(range(b.first, b.end)))
        spawns[sid] = pos[b.spawn]
        if b.join is not None:
            joins[sid] = pos[b.join]
        offsets[sid] = round(b.delay_s * 1000, 3)
    after = {where[k]: sorted(where[p] for p in ps) for k, ps in (session.after or {}).items()}
    return {"streams": streams, "spawns": spawns, "joins": joins, "offsets": offsets,
            "after": after}


@pytest.mark.parametrize("corpus", ["claude-code-subagents", "claude-code", "agentx-small"])
def test_trees_are_the_harness_s(corpus):
    golden = json.loads(gzip.decompress((GOLDEN / f"{corpus}.json.gz").read_bytes()))
    sessions = {s.session_id: s for s in load_trace(TRACES / corpus)}
    assert set(sessions) == set(golden)
    split = 0
    for sid, convs in golden.items():
        want, got = _harness_view(convs), _kvbench_view(sessions[sid])
        assert got["streams"].keys() == want["streams"].keys(), sid
        for name, turns in want["streams"].items():
            assert got["streams"][name] == pytest.approx(turns, abs=2e-3), (sid, name)
        assert got["spawns"] == want["spawns"], sid
        assert got["joins"] == want["joins"], sid
        assert got["offsets"] == pytest.approx(want["offsets"], abs=2e-3), sid
        assert got["after"] == want["after"], sid
        split += any("::sa:" not in c["id"] and "::" in c["id"] for c in convs)
    # the corpora hold flat chains the harness splits off (none in the small oracle set)
    assert split == {"claude-code-subagents": 2, "claude-code": 14, "agentx-small": 0}[corpus]


def _call(pos: int, t: float, ids: list[int], *, out: int = 5000, model: str = "m",
          n_in: int = 20000) -> Call:
    return Call(pos, t, 1.0, tuple(ids), model, n_in, out)


def test_a_fan_out_splits_into_chains_and_a_compaction_stays_one_agent():
    calls = [
        _call(0, 0.0, [1, 2]), _call(1, 2.0, [1, 2, 3]), _call(2, 3.5, [1, 2, 3, 4]),
        # three forks off request 2 while it runs, at once: a worker group
        _call(3, 4.0, [1, 2, 3, 10]), _call(4, 4.1, [1, 2, 3, 20]), _call(5, 4.2, [1, 2, 3, 30]),
        _call(6, 6.0, [1, 2, 3, 10, 11]), _call(7, 6.1, [1, 2, 3, 20, 21]),
        _call(8, 7.0, [1, 2, 3, 4, 5]), _call(9, 9.0, [1, 2, 3, 4, 5, 6, 7]),
        # the main agent after a compaction (a shorter prefix of its context): a seam
        _call(10, 12.0, [1, 2, 80]), _call(11, 14.0, [1, 2, 80, 81]),
        # a small one-shot on another model: a sidecar
        _call(12, 14.5, [1, 2, 50], model="small", out=10, n_in=300),
    ]
    got = partition(calls)
    # what agentx-harness 1.0.12's `_detect_and_split_flat_chains` returns for these
    # requests (run in its venv): main [0, 1, 2, 8, 9, 10, 11], and the chains below
    assert [c.pos for c in got.main] == [0, 1, 2, 8, 9, 10, 11]
    names = {name: [c.pos for c in cs] for name, cs in got.workers}
    assert names == {"wg:000_000": [3, 6], "wg:000_001": [4, 7], "wg:000_002": [5],
                     "aux:003": [12]}


def test_a_title_call_does_not_found_the_main_chain():
    calls = [_call(0, 0.0, [99], out=10), _call(1, 1.0, [1, 2]), _call(2, 3.0, [1, 2, 3])]
    assert [c.pos for c in split_preamble(calls)[0]] == [0]
    # nothing splits: the recorded order stays
    assert [c.pos for c in partition(calls).main] == [0, 1, 2]
