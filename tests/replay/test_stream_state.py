"""What a replay keeps for a session is what its next request needs, not its history: each
stream of a live session tree holds the rendered blocks of one context (its latest turn's),
a turn's hash ids are a few runs whatever its context, and the ideal-cache ceiling holds an
edge per stream, not one per turn or block. Structure, not bytes or seconds."""

from __future__ import annotations

import asyncio

from fixtures.body_recorder import Recorder

from kvbench.replay import ReplayConfig, replay
from kvbench.replay.lanes import Lanes
from kvbench.workload import SyntheticSpec


def _whole(turn) -> int:
    return min(len(turn.hash_ids), turn.input_tokens // turn.block_tokens)


def test_per_stream_state_is_one_context_whatever_the_turns(tmp_path, monkeypatch):
    held: list[tuple[int, int, int, int]] = []  # (streams held, streams, pieces, bound)
    runs: list[int] = []
    last: dict[tuple[str, int], int] = {}  # (tree, stream) -> whole blocks of its last turn
    real_prompt = Lanes._prompt

    async def prompt(self, tree, r, turn, *rest):
        out = await real_prompt(self, tree, r, turn, *rest)
        before = last.get((tree.key, r.stream), 0)
        last[(tree.key, r.stream)] = _whole(turn)
        held.append((len(tree.prompts), len(tree.run.streams),
                     tree.prompts[r.stream].blocks, max(_whole(turn), before)))
        runs.append(len(turn.hash_ids.runs))
        return out

    monkeypatch.setattr(Lanes, "_prompt", prompt)
    lanes: list[Lanes] = []
    real_init = Lanes.__init__
    monkeypatch.setattr(Lanes, "__init__",
                        lambda self, *a, **k: real_init(self, *a, **k) or lanes.append(self))

    _replay_synthetic(tmp_path, SyntheticSpec(
        num_sessions=3, seed=2, scale=0.02, max_turns=60, turns_mu=4.0, subagent_prob=0.2,
        compaction_prob=0.05))
    assert len(held) > 60
    assert all(n_held <= n_streams for n_held, n_streams, _, _ in held)
    assert all(pieces <= bound for _, _, pieces, bound in held)
    assert max(runs) <= 2  # the shared prefix and the context's own growth
    edges, stack = 0, list(lanes[0].ideal._roots.values())
    while stack:
        edge = stack.pop()
        edges += 1
        stack.extend(edge.below.values())
    streams = len(last)
    assert edges <= 2 + 2 * streams < len(held)


def test_a_finished_trees_contexts_are_freed_by_slices(tmp_path, monkeypatch):
    """When a lane's session tree ends, its streams' rendered contexts are emptied a slice
    per loop pass (here 2 blocks), not dropped in one pass: every tree released, every
    context emptied, and the release gave the loop back at least once per slice."""
    from kvbench.replay import lanes as lanes_mod

    monkeypatch.setattr(lanes_mod, "RELEASE_SLICE_BLOCKS", 2)
    released: list[tuple[list, int]] = []  # (the tree's streams, loop passes the release took)
    real = Lanes._release

    async def release(tree):
        streams, before = list(tree.prompts.values()), [p.blocks for p in
                                                        tree.prompts.values()]
        steps = 0
        coro = real(tree)
        try:
            while True:
                coro.send(None)  # each yield is a pass given back to the loop
                steps += 1
                await asyncio.sleep(0)
        except StopIteration:
            pass
        released.append((streams, steps, before))

    monkeypatch.setattr(Lanes, "_release", staticmethod(release))

    _replay_synthetic(tmp_path, SyntheticSpec(num_sessions=3, seed=2, scale=0.02, max_turns=6,
                                              subagent_prob=0.0))
    assert len(released) >= 3  # every session's tree (two lanes, three sessions)
    for streams, steps, before in released:
        assert all(not p.blocks and not p.segments for p in streams)
        assert steps >= sum(max(0, (n - 1) // 2) for n in before) > 0


def _replay_synthetic(tmp_path, synthetic: SyntheticSpec) -> None:
    """Replay `synthetic` on two lanes against a recording server, no think time."""
    async def run() -> None:
        rec = Recorder()
        srv = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=tmp_path,
                           concurrency=2, think_time_scale=0, max_tokens_cap=2,
                           synthetic=synthetic)
        async with srv:
            await replay(cfg)

    asyncio.run(run())
