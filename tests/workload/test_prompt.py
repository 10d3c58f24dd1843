from __future__ import annotations

import pytest

from kvbench.workload import PromptBuilder, Turn, Vocabulary
from kvbench.workload.prompt import MARKER_TOKENS


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from fixtures.tiny_model import build_tokenizer

    d = tmp_path_factory.mktemp("tok")
    build_tokenizer(d)
    return d


def test_every_prompt_has_exactly_the_turns_token_count(tiny_dir):
    from transformers import AutoTokenizer  # not at collection: every xdist worker collects

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    b = PromptBuilder(Vocabulary(str(tiny_dir)), "run-a")
    for n_in, ids, bs in [(150, (1, 2), 64), (100, (1, 2), 64), (3, (), 64), (513, (7,), 512),
                          (37, (1, 2, 3, 4, 5, 6, 7, 8, 9), 4)]:
        p = b.build(Turn(n_in, 1, ids, bs), "ns", "tail")
        assert p.num_tokens == n_in
        assert len(tok.encode(p.text, add_special_tokens=False)) == n_in


def test_equal_leading_blocks_give_byte_identical_prefixes_and_token_ids(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    vocab = Vocabulary(str(tiny_dir))
    text = PromptBuilder(vocab, "run-a")
    ids = PromptBuilder(vocab, "run-a", token_ids=True)
    a, b = Turn(2 * 64 + 10, 1, (5, 6), 64), Turn(3 * 64 + 3, 1, (5, 6, 7), 64)
    pa, pb = text.build(a, "ns", "x"), text.build(b, "ns", "y")
    prefix = text.build(Turn(128, 1, (5, 6), 64), "ns", "z").text
    assert pa.text.startswith(prefix) and pb.text.startswith(prefix)
    assert ids.build(b, "ns", "y").token_ids == tok.encode(pb.text, add_special_tokens=False)
    # another namespace (another local-scope trace, or a recycled pass) shares nothing
    other = text.build(Turn(128, 1, (5, 6), 64), "other", "z").text
    assert other[: len(prefix) // 2] != prefix[: len(prefix) // 2]


def test_run_marker_busts_the_cache_across_runs_only():
    vocab = Vocabulary(None)
    t = Turn(64, 1, (1,), 64)
    run1a = PromptBuilder(vocab, "run-1").indices(t, "ns", 0)
    run1b = PromptBuilder(vocab, "run-1").indices(t, "ns", 0)
    run2 = PromptBuilder(vocab, "run-2").indices(t, "ns", 0)
    assert run1a == run1b
    assert run1a[:MARKER_TOKENS] != run2[:MARKER_TOKENS]
    assert run1a[MARKER_TOKENS:] == run2[MARKER_TOKENS:]


def _whole(turn: Turn) -> int:
    return min(len(turn.hash_ids), turn.input_tokens // turn.block_tokens)


def test_a_stream_holds_one_context_and_renders_only_the_blocks_a_turn_adds(monkeypatch):
    """Over a session's turns (growing, compacted, with subagents inline) a stream keeps the
    rendered blocks of its latest turn's context and nothing of its history, renders just the
    blocks a turn does not share with the one before, and sends what a prompt rendered from
    nothing would be."""
    from kvbench.workload import SyntheticSpec, generate_sessions
    from kvbench.workload.blocks import common_prefix
    from kvbench.workload.prompt import PromptStream

    spec = SyntheticSpec(num_sessions=3, seed=11, scale=0.05, max_turns=40,
                         compaction_prob=0.15, subagent_prob=0.2)
    vocab = Vocabulary(None)
    incremental = PromptBuilder(vocab, "run", shared_blocks=0)  # nothing shared: all counted
    scratch = PromptBuilder(vocab, "run", shared_blocks=0)
    rendered = []
    real = incremental._own
    monkeypatch.setattr(incremental, "_own",
                        lambda prefix, ids, bs: rendered.extend(ids) or real(prefix, ids, bs))
    compacted = 0
    for session in generate_sessions(spec):
        stream, prev = PromptStream(), None
        for k, turn in enumerate(session.turns):
            rendered.clear()
            got = incremental.json(turn, "ns", k, stream)
            fresh = scratch.json(turn, "ns", k)  # a stream of its own: from nothing
            assert b"".join(got.pieces) == b"".join(fresh.pieces)
            shared = 0 if prev is None else min(common_prefix(prev.hash_ids, turn.hash_ids),
                                                _whole(prev))
            assert len(rendered) == max(0, _whole(turn) - shared)
            compacted += prev is not None and _whole(turn) < _whole(prev)
            assert stream.blocks == max(_whole(turn), shared)  # this context, no more
            assert stream.ids is turn.hash_ids
            prev = turn
    assert compacted  # the case where a context shrinks was exercised


def test_the_shared_blocks_stay_within_their_bound():
    from kvbench.workload.prompt import PromptStream

    b = PromptBuilder(Vocabulary(None), "run", shared_blocks=8)
    first = PromptStream()  # alive: every later stream of "ns" shares it
    b.json(Turn(64, 1, (0,), 64), "ns", 0, first)
    for h in range(50):
        b.json(Turn(4 * 64, 1, (h, h + 1, h + 2, h + 3), 64), "ns", h)
    assert len(b._shared) == 8


def test_a_stream_alone_in_its_namespace_renders_past_the_shared_cache(monkeypatch):
    """A session whose hash ids are its own (AgentX's: a namespace a session) keeps its
    blocks in its stream only; once a second live stream takes the namespace, both go
    through the shared cache, and a third stream's shared prefix is all hits. The bytes
    are the same either way."""
    from kvbench.workload.prompt import PromptStream

    b = PromptBuilder(Vocabulary(None), "run")
    every = PromptBuilder(Vocabulary(None), "run")  # each prompt from a stream of its own
    rendered: list[int] = []
    real = b._own
    monkeypatch.setattr(b, "_own", lambda p, ids, bs: rendered.extend(ids) or real(p, ids, bs))
    grow = [Turn(n * 64 + 5, 1, tuple(range(n)), 64) for n in (4, 9, 20)]

    def send(stream: PromptStream, turn: Turn, namespace: str) -> None:
        got = b"".join(b.json(turn, namespace, 0, stream).pieces)
        assert got == b"".join(every.json(turn, namespace, 0).pieces)

    alone = [PromptStream(), PromptStream()]
    for turn in grow:  # two sessions, a namespace each
        send(alone[0], turn, "s1")
        send(alone[1], turn, "s2")
    assert alone[0].alone and alone[1].alone
    assert len(rendered) == 2 * 20 and not b._shared  # each block rendered once, none cached

    rendered.clear()
    second = PromptStream()  # a subagent of s1's tree, sharing its first 9 blocks
    send(second, Turn(12 * 64, 1, (*range(9), 100, 101, 102), 64), "s1")
    assert not second.alone and not alone[0].alone and alone[1].alone
    assert len(rendered) == 12 and len(b._shared) == 12  # rendered again once, then kept
    rendered.clear()
    send(alone[0], Turn(22 * 64, 1, tuple(range(22)), 64), "s1")  # s1's growth: cached now
    assert rendered == [20, 21] and len(b._shared) == 14
    rendered.clear()
    send(PromptStream(), Turn(9 * 64, 1, tuple(range(9)), 64), "s1")
    assert rendered == []  # the shared prefix: all hits


def test_a_streams_segments_read_and_cut_as_its_blocks_would():
    """A stream holds its blocks as segments (runs of blocks joined): every span reads the
    bytes of those blocks, and a cut anywhere (at a segment's edge, inside one, at 0, past
    the end) keeps exactly the leading blocks, against a list of one bytes object a block."""
    import random

    from kvbench.workload.prompt import PromptStream

    rng = random.Random(5)
    stream, model = PromptStream(), []  # the model: one bytes object a block
    for step in range(300):
        if rng.random() < 0.7 or not model:
            blocks = [bytes([65 + rng.randrange(26)]) * rng.randint(1, 9)
                      for _ in range(rng.randint(1, 7))]
            stream.add(blocks)
            model += blocks
        else:
            keep = rng.choice([0, len(model) + 3, rng.randrange(len(model) + 1),
                               stream.starts[-1]])
            stream.truncate(keep)
            del model[keep:]
        assert stream.blocks == len(model)
        assert len(stream.segments) == len(stream.starts) <= len(model)
        for _ in range(4):
            a = rng.randrange(len(model) + 1)
            b = rng.randrange(a, len(model) + 1)
            assert b"".join(stream.span(a, b)) == b"".join(model[a:b]), (step, a, b)
    stream.truncate(0)
    assert not stream.segments and not stream.starts and stream.blocks == 0


def test_a_prompt_is_a_few_segments_whatever_its_blocks():
    """A 1,000-block context rendered in the stream's slices is ~16 segments, and its prompt
    is those (two ends sliced) with its head and tail, not a piece a block: what the
    collector visits and `writelines` iterates per request."""
    from kvbench.workload.prompt import SEGMENT_BLOCKS, PromptStream

    b = PromptBuilder(Vocabulary(None), "run")
    turn = Turn(1000 * 16 + 5, 1, tuple(range(1000)), 16)
    stream = PromptStream()
    while b.sync(stream, turn, "ns", 100):  # slices of 100: segments of 64 and 36
        pass
    assert stream.blocks == 1000
    assert len(stream.segments) == 10 * 2 == len(stream.starts)
    assert max(map(len, stream.segments)) <= SEGMENT_BLOCKS * 16 * 8
    p = b.json(turn, "ns", 0, stream)
    assert len(p.pieces) <= len(stream.segments) + 4
    whole = PromptBuilder(Vocabulary(None), "run", shared_blocks=0).json(turn, "ns", 0)
    assert b"".join(p.pieces) == b"".join(whole.pieces)
