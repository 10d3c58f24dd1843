"""One trace loader: `simulate` and `replay` read traces through the same loader and
validation, so each bad trace is the same clean error (file, line or record, field, value)
from both, exit 2, never a traceback or a silently wrong result."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES
from fixtures.servers import free_port

from kvbench.cli import main


def session(**overrides) -> dict:
    doc = {"id": "s1", "block_size": 64, "hash_id_scope": "local",
           "requests": [{"t": 0, "type": "n", "in": 130, "out": 10, "hash_ids": [1, 2],
                         "think_time": 0.5}]}
    doc.update(overrides)
    return doc


def request(**overrides) -> dict:
    r = {"t": 0, "type": "n", "in": 130, "out": 10, "hash_ids": [1, 2], "think_time": 0.5}
    r.update(overrides)
    return session(requests=[r])


def write(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def truncated_gzip(tmp_path) -> str:
    raw = (TRACES / "claude-code" / "trace_0165.json.gz").read_bytes()
    return write(tmp_path, "cut.json.gz", raw[: len(raw) // 2])


CASES = {
    "truncated gzip": (truncated_gzip, "cannot read trace"),
    "block_size 0": (lambda d: write(d, "t.json", session(block_size=0)),
                     "field block_size = 0 must be an integer in 1..1048576"),
    "block_size -64": (lambda d: write(d, "t.json", session(block_size=-64)),
                       "field block_size = -64 must be an integer in 1..1048576"),
    "requests as a dict": (lambda d: write(d, "t.json", session(requests={"0": {}})),
                           "field session.requests = {'0': {}} must be list"),
    "negative think time": (lambda d: write(d, "t.json", request(think_time=-1)),
                            "field requests[0].think_time = -1 must be a finite number >= 0"),
    "NaN think time": (lambda d: write(d, "t.json", json.dumps(request()).replace(
        '"think_time": 0.5', '"think_time": NaN')), "t.json:1: invalid JSON"),
    "unknown type": (lambda d: write(d, "t.json", request(type="x")),
                     "field requests[0].type = 'x'; allowed: n, s, subagent"),
    "string token count": (lambda d: write(d, "t.json", request(**{"in": "130"})),
                           "field requests[0].in = '130' must be int"),
    "empty file": (lambda d: write(d, "t.jsonl", ""), "the trace holds no records"),
    "empty requests": (lambda d: write(d, "t.json", session(requests=[])),
                       "field requests is empty"),
    "negative mooncake timestamp": (
        lambda d: write(d, "t.jsonl", json.dumps(
            {"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]}) + "\n"),
        "t.jsonl:1: field timestamp = -5 must be a finite number >= 0"),
    "huge string value": (lambda d: write(d, "t.json", request(out="y" * 1_000_000)),
                          "field requests[0].out = 'yyyy"),
    "not a trace": (lambda d: write(d, "t.json", {"hello": 1}), "unrecognised trace record"),
}


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err
    # simulate may say how it runs first ("closed loop: 8 session lanes ...")
    return next(line for line in err.splitlines() if line.startswith("error: "))


@pytest.mark.parametrize("name", list(CASES))
def test_simulate_and_replay_give_the_same_clean_error(name, tmp_path, capsys):
    make, message = CASES[name]
    path = make(tmp_path)
    sim = _error(capsys, ["simulate", "--trace", path])
    # replay never reaches the (closed) port: the trace is refused first
    rep = _error(capsys, ["replay", "--url", f"http://127.0.0.1:{free_port()}", "--model", "m",
                          "--trace", path, "--output", str(tmp_path / "out")])
    assert message in sim, sim
    assert sim == rep
    assert sim.startswith(f"error: {path}")
    assert len(sim) < 300  # a huge value is cut, never printed whole


def test_real_traces_load_the_same_in_both_views():
    """The simulator's view is the loader's: same requests, same token counts."""
    from kvbench.sim import load_traces
    from kvbench.workload import load_trace

    paths = sorted((TRACES / "claude-code").glob("trace_*.json.gz"))[:5]
    sim = load_traces(paths)
    sessions = load_trace(paths)
    assert [sum(r.input_tokens for r in t.sessions[0]) for t in sim] == \
           [sum(t.input_tokens for t in s.turns) for s in sessions]
    with gzip.open(paths[0], "rt") as f:
        doc = json.load(f)
    assert sim[0].name == doc["id"] and len(sim[0].sessions[0]) == len(doc["requests"])
