"""Under `--profile agentx` a chat prompt is the harness's message list, not one user message
(workload/messages.py): agentx-harness 1.0.12's own messages for the bundled traces
(tests/data/agentx_messages/, written by benchmarks/agentx_messages.py with the harness's
Python: every conversation's every turn as role + token count per message) are the oracle.
kvbench's layout of each stream must give the same roles, the same segment boundaries and the
same token counts, turn by turn; the rendered request must carry them (one token is one word
without a tokenizer) and cut the one-message prompt's own content into them."""

from __future__ import annotations

import asyncio
import gzip
import json
import re

import orjson
import pytest
from conftest import DATA, TRACES
from fixtures.body_recorder import Recorder

from kvbench.replay import ReplayConfig, replay
from kvbench.workload.loader import load_trace
from kvbench.workload.messages import ChatLayout
from kvbench.workload.prompt import PromptBuilder, PromptStream, Vocabulary, tree_marker
from kvbench.workload.weka import harness_stream_id

GOLDEN = DATA / "agentx_messages"


def _streams(session) -> dict[str, tuple[str | None, list[int]]]:
    """Each stream's harness id, agent and turns (indexes into `session.turns`)."""
    branches = session.tree()
    owned = {k for b in branches for k in range(b.first, b.end)}
    out = {session.session_id: (None, [k for k in range(len(session.turns)) if k not in owned])}
    for b in branches:
        out[harness_stream_id(session.session_id, b.agent)] = (b.agent,
                                                               list(range(b.first, b.end)))
    return out


def _layout(session, agent: str | None, ks: list[int]) -> ChatLayout:
    prefix = session.meta.get("prompt_prefix_tokens", {}).get(agent or "", 0)
    return ChatLayout([session.turns[k] for k in ks], prefix, (session.session_id, agent))


def _shape(messages: list[tuple[str, int]]) -> str:
    """The golden data's form: a message as its role's initial and its tokens."""
    return " ".join(f"{role[0]}{n}" for role, n in messages)


@pytest.mark.parametrize("corpus", ["agentx-small", "claude-code-subagents", "claude-code"])
def test_every_turn_s_messages_are_the_harness_s(corpus):
    golden = json.loads(gzip.decompress((GOLDEN / f"{corpus}.json.gz").read_bytes()))
    sessions = load_trace(TRACES / corpus)
    assert {s.session_id for s in sessions} == set(golden)
    turns = roles = 0
    for s in sessions:
        streams = _streams(s)
        assert set(streams) == set(golden[s.session_id])
        for sid, (agent, ks) in streams.items():
            layout = _layout(s, agent, ks)
            for p, k in enumerate(ks):
                bs = s.turns[k].block_tokens
                got = _shape([(m.role, m.tokens(bs)) for m in layout.at(p)])
                assert got == golden[s.session_id][sid][p], (sid, p)
                turns += 1
                roles |= 4 * ("a" in got) | 2 * ("u" in got) | ("s" in got)
    # every role occurs where the traces declare a system prefix (not agentx-small's)
    assert roles == (6 if corpus == "agentx-small" else 7) and turns > 100


def test_a_layout_goes_back_to_an_earlier_turn_as_the_same():
    s = load_trace(TRACES / "agentx-small")[0]
    agent, ks = _streams(s)[s.session_id]
    layout = _layout(s, agent, ks)
    later = list(layout.at(len(ks) - 1))
    first = list(layout.at(2))
    assert first == list(_layout(s, agent, ks).at(2)) and layout.at(len(ks) - 1) == later


def test_the_messages_are_the_one_message_prompt_cut_at_the_segments():
    """Same words as the default prompt (marker first), split at the segment boundaries, a
    message per segment with its role and its token count in words."""
    prompts = PromptBuilder(Vocabulary(), "run-1")
    for s in load_trace(TRACES / "agentx-small")[:2]:
        for sid, (agent, ks) in _streams(s).items():
            layout, stream = _layout(s, agent, ks), PromptStream()
            for p, k in enumerate(ks):
                turn = s.turns[k]
                got = prompts.json(turn, s.session_id, (sid, k), stream, layout, p)
                assert got.messages and got.num_tokens == turn.input_tokens
                messages = orjson.loads(b"".join(got.pieces))
                want = [(m.role, m.tokens(turn.block_tokens)) for m in layout.at(p)]
                assert [(m["role"], len(m["content"].split())) for m in messages] == want
                one = prompts.build(turn, s.session_id, (sid, k)).text
                assert "".join(m["content"] for m in messages) == one


def test_the_tree_marker_opens_the_first_user_message_after_the_system_one():
    """With a tree's marker (the AgentX profile) the run marker is gone, the system message
    (the trace's declared prefix) comes first as the harness sends it, untouched and the
    same for every tree, and the marker opens the user message after it
    (aiperf/workers/worker.py:344-409 `_apply_cache_bust`, first_turn_prefix); its words are
    counted on top of the turn's."""
    prompts = PromptBuilder(Vocabulary(), "run-1")
    s = load_trace(TRACES / "claude-code-subagents")[0]
    sid = s.session_id
    agent, ks = _streams(s)[sid]
    bodies = []
    for bust in (tree_marker("run-1", 0, 0, sid), tree_marker("run-1", 1, 0, sid)):
        layout, stream = _layout(s, agent, ks), PromptStream()
        for p, k in enumerate(ks[:2]):
            turn = s.turns[k]
            got = prompts.json(turn, s.namespace, (sid, k), stream, layout, p, bust)
            messages = orjson.loads(b"".join(got.pieces))
            assert [m["role"] for m in messages][:2] == ["system", "user"]
            assert messages[1]["content"].startswith(bust) and got.marker == bust
            assert not any(bust in m["content"] for m in messages[2:] + messages[:1])
            assert got.marker_at_block == layout.at(p)[1].first
            assert got.num_tokens == turn.input_tokens + got.marker_tokens
            assert got.marker_tokens == 1  # no tokenizer: one word
            bodies.append(messages)
    # two trees (passes) of one trace: the same system message, other markers after it
    assert bodies[0][0] == bodies[2][0] and bodies[0][1] != bodies[2][1]
    assert bodies[0][1]["content"].split()[1:] == bodies[2][1]["content"].split()[1:]


async def _replay(tmp_path, profile: str | None) -> list[tuple[str, dict]]:
    rec = Recorder(keep_bodies=True)
    srv = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=tmp_path,
                       trace=[TRACES / "agentx-small"], think_time_scale=0, max_tokens_cap=4,
                       concurrency=2, max_requests=12, profile=profile, start="sampled",
                       start_ratio=(0.25, 0.75), seed=42, warmup_per_lane=2,
                       run_marker="0123456789ab")
    async with srv:
        summary = await replay(cfg)
    assert summary["requests"]["errors"] == 0
    assert rec.bodies is not None
    return rec.bodies


MARKER = re.compile(r"\[rid:[0-9a-f]{12}\]\n\n")


def _unmarked(body: dict) -> tuple[str | None, list[dict]]:
    """The request's cache-bust marker and its messages without it."""
    marker, out = None, []
    for m in body["messages"]:
        got = MARKER.match(m["content"])
        if got is not None:
            assert marker is None, "one marker per request"
            marker, m = got.group(0), {**m, "content": m["content"][got.end():]}
        out.append(m)
    return marker, out


def test_replay_under_the_profile_sends_the_harness_s_messages(tmp_path):
    """Every request (warm-up included) carries a message list the harness sends for a turn
    of the same trace; without the profile, one user message as before."""
    golden = json.loads(gzip.decompress((GOLDEN / "agentx-small.json.gz").read_bytes()))
    seen = asyncio.run(_replay(tmp_path / "agentx", "agentx"))
    assert len(seen) > 12  # the warm-up's (from t*, with the history), then 12 profiled
    several = 0
    for key, body in seen:
        trace = key.split("#")[0]
        shapes = {shape for turns in golden[trace].values() for shape in turns}
        _, messages = _unmarked(body)
        got = _shape([(m["role"], len(m["content"].split())) for m in messages])
        assert got in shapes, (key, got)
        several += len(body["messages"]) > 1
    assert several
    # the harness's cache-bust marker opens the first user message (after the system one),
    # the same on every request of a session tree, warm-up and profiling, and another for
    # each tree: sha256 of run:pass:lane:trace (aiperf timing/strategies/cache_bust.py:106-111)
    lanes = {}
    for line in (tmp_path / "agentx" / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        lanes.setdefault(r["session_id"], set()).add(r["lane"])
        assert r["cache_bust_marker"] == MARKER.match(r["cache_bust_marker"]).group(0)
    markers: dict[str, set[str]] = {}
    for key, body in seen:
        marker, _ = _unmarked(body)
        first_user = next(m for m in body["messages"] if m["role"] == "user")
        assert marker is not None and first_user["content"].startswith(marker), key
        assert all(m["role"] == "system" for m in
                   body["messages"][:body["messages"].index(first_user)])
        markers.setdefault(key, set()).add(marker)
    assert all(len(m) == 1 for m in markers.values()), markers
    assert len({m for ms in markers.values() for m in ms}) == len(markers) >= 2
    for key, (marker,) in markers.items():
        trace, _, pass_no = key.partition("#")
        (lane,) = lanes[key]
        assert marker == tree_marker("0123456789ab", int(pass_no or 0), lane, trace)
    plain = asyncio.run(_replay(tmp_path / "plain", None))
    assert all([m["role"] for m in b["messages"]] == ["user"] for _, b in plain)
    assert not any(MARKER.search(b["messages"][0]["content"]) for _, b in plain)


def test_marker_places_are_the_layout_s_first_user_message_and_are_laid_out_once():
    """`TreeRun.marker_places` (the simulator's marker block per turn) is `marker_segment`
    over each turn's layout, for every stream of every session; a second pass of the same
    session (another TreeRun, as another row or arm replays it) reuses the first's, and a pass
    whose turns are shaped otherwise (other blocks) is laid out anew."""
    from kvbench.workload import tree
    from kvbench.workload.bounds import WorkloadBounds
    from kvbench.workload.messages import marker_segment

    plain = WorkloadBounds(concurrency=1)
    checked = 0
    for s in load_trace(TRACES / "claude-code-subagents"):
        run = tree.TreeRun(s, plain.shaped, plain.think_s)
        for stream in range(len(run.streams)):
            places, blocks = run.marker_places(stream)
            layout, want_places = run.chat_layout(stream, None)
            assert places == want_places
            for p in range(len(layout.turns)):
                segments = layout.at(p)
                i = marker_segment(segments)
                assert blocks[p] == (None if i is None else segments[i].first)
                checked += 1
            again = tree.TreeRun(s, plain.shaped, plain.think_s).marker_places(stream)
            assert again[1] is blocks
    assert checked > 50
    s = load_trace(TRACES / "claude-code-subagents")[0]
    coarse = WorkloadBounds(concurrency=1, block_tokens=4 * s.turns[0].block_tokens)
    run = tree.TreeRun(s, coarse.shaped, coarse.think_s)
    _, blocks = run.marker_places(0)  # another shaping: its own layout, not the plain one's
    layout, _ = run.chat_layout(0, None)
    want = []
    for p in range(len(layout.turns)):
        segments = layout.at(p)
        i = marker_segment(segments)
        want.append(None if i is None else segments[i].first)
    assert blocks == want and blocks != tree.TreeRun(s, plain.shaped,
                                                     plain.think_s).marker_places(0)[1]
