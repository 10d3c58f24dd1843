"""The AgentX-shaped corpus (issue 36 item 1): its parameters are the fit of the committed
Claude Code traces, it draws what it was fitted to, sessions keep Claude Code's prefix
structure (a growing context, compactions that keep the system prefix, subagents sharing
theirs), contexts stay within the row's variant, and a turn's ids stay a few integers."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest

from kvbench.workload import load_trace
from kvbench.workload.blocks import Blocks, common_prefix, namespaced
from kvbench.workload.choice import parse_trace
from kvbench.workload.corpus import (
    AGENTX_TRACES,
    PARAMS,
    CorpusSpec,
    context_variant_tokens,
    generate_corpus,
)
from kvbench.workload.corpus_fit import fit, ks_statistic, samples

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
FIT_SET = [TRACES / "claude-code", TRACES / "claude-code-subagents"]


@pytest.fixture(scope="module")
def fit_sessions():
    return load_trace(FIT_SET, split_chains=False)  # the traces as recorded


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(CorpusSpec(sessions=600, seed=3, context_tokens=10**9))


def test_blocks_behave_as_the_tuple_of_their_ids() -> None:
    b = Blocks([(0, 5), (5, 7), (10, 13), (20, 20)])
    ids = (0, 1, 2, 3, 4, 5, 6, 10, 11, 12)
    assert b.runs == ((0, 7), (10, 13))  # canonical: joined, empty dropped
    assert len(b) == 10 and tuple(b) == ids and b == ids and b == list(ids)
    assert [b[i] for i in range(-10, 10)] == [ids[i] for i in range(-10, 10)]
    for i in range(11):
        for j in range(i, 11):
            assert tuple(b[i:j]) == ids[i:j] and namespaced(b, 7, j, i) == [
                7 + x for x in ids[i:j]]
    assert b[::2] == ids[::2] and hash(b) == hash(ids)
    with pytest.raises(IndexError):
        b[10]
    assert b.extended(13, 15) == (*ids, 13, 14) and b.extended(13, 15).runs[-1] == (10, 15)
    assert common_prefix(b, Blocks([(0, 7), (10, 11), (99, 100)])) == 8
    assert common_prefix(b, Blocks([(0, 3)])) == 3 and common_prefix(b, Blocks([(1, 3)])) == 0
    assert common_prefix(ids, (*ids[:4], 99)) == 4 and common_prefix(ids, list(ids)) == 10
    # lists either way round: the shorter a prefix of the longer, or parting
    for a, c in [([1, 2], [1, 2, 3]), ([1, 2, 3], [1, 2]), ([1, 2, 3], [1, 9]), ([], [1]),
                 ([1, 9], [1, 2, 3]), ([4], [4])]:
        want = next((i for i, (x, y) in enumerate(zip(a, c, strict=False)) if x != y),
                    min(len(a), len(c)))
        assert common_prefix(a, c) == common_prefix(c, a) == want


def test_the_shipped_parameters_are_the_fit_of_the_committed_traces(fit_sessions) -> None:
    shipped = orjson.loads(PARAMS.read_bytes())
    again = fit(fit_sessions)
    assert again["tables"] == shipped["tables"] and again["scalars"] == shipped["scalars"]
    assert again["copula"] == shipped["copula"]
    assert shipped["source"]["sessions"] == str(len(fit_sessions)) == "106"
    # subagents: the 21 of the six sessions with them; no main-agent table from a handful
    assert shipped["tables"]["sub_turns"]["n"] == 21
    assert min(t["n"] for k, t in shipped["tables"].items() if not k.startswith(
        ("sub_", "fanout", "compact", "trim"))) >= 100


def test_the_corpus_draws_what_it_was_fitted_to(fit_sessions, corpus) -> None:
    real, _ = samples(fit_sessions)
    drawn, rates = samples(corpus)
    # the per-turn and per-session distributions, against the fit set they came from
    for name in ("output_tokens", "think_s", "growth_rel", "turns", "first_input_tokens"):
        assert ks_statistic(real[name], drawn[name]) < 0.1, name
    assert rates["spawn_prob"] == pytest.approx(0.0022, abs=0.001)
    assert drawn["fanout"] and drawn["sub_turns"]


def test_sessions_keep_claude_codes_prefix_structure(corpus) -> None:
    grew = rewritten = 0
    for s in corpus[:200]:
        assert s.namespace == s.session_id  # local hash scope: sessions share nothing
        main = [t for t in s.turns if t.agent is None]
        prefix = main[0].hash_ids[:20]
        for a, b in itertools.pairwise(main):
            shared = common_prefix(a.hash_ids, b.hash_ids)
            if b.input_tokens >= a.input_tokens:  # the conversation appended
                assert shared == len(a.hash_ids)
                grew += 1
            else:  # trimmed or compacted: the system + tool prefix is kept
                assert b.hash_ids[:20] == prefix
                rewritten += 1
        subs = {}
        for t in s.turns:
            if t.agent is not None:
                subs.setdefault(t.agent, t)
        firsts = list(subs.values())
        for a, b in itertools.pairwise(firsts):  # siblings share their prefix
            assert common_prefix(a.hash_ids, b.hash_ids) >= 20
            assert common_prefix(a.hash_ids, main[0].hash_ids) == 0
    assert grew > 1000 and rewritten > 0
    # a turn's ids are a few runs, however long its prompt
    assert max(len(t.hash_ids.runs) for s in corpus for t in s.turns) <= 8


def test_contexts_stay_within_the_rows_variant() -> None:
    assert context_variant_tokens("dsv4") == context_variant_tokens("kimik3") == 1_000_000
    assert context_variant_tokens("qwen3.5") == context_variant_tokens("glm5") == 256_000
    capped = generate_corpus(CorpusSpec(sessions=100, seed=1))
    full = generate_corpus(CorpusSpec(sessions=100, seed=1, context_tokens=1_000_000))
    assert all(t.input_tokens + t.output_tokens <= 256_000 for s in capped for t in s.turns)
    assert max(t.input_tokens for s in full for t in s.turns) > 256_000


def test_session_i_depends_only_on_the_seed_and_i() -> None:
    small = generate_corpus(CorpusSpec(sessions=5, seed=7))
    large = generate_corpus(CorpusSpec(sessions=50, seed=7))
    assert [s.turns for s in small] == [s.turns for s in large[:5]]
    assert [s.turns for s in generate_corpus(CorpusSpec(sessions=5, seed=8))] != [
        s.turns for s in small]


def test_the_default_workload_is_sized_to_the_row() -> None:
    source = parse_trace(None)
    assert source.kind == "corpus"
    assert len(source.sessions_for("qwen3.5", 8)) == AGENTX_TRACES
    assert len(source.sessions_for("dsv4", 512)) == 512
    assert source.describe("dsv4", 512)["corpus"] == {
        "sessions": 512, "seed": 0, "context_tokens": 1_000_000, "block_tokens": 256}
    assert parse_trace(["bundled"]).trace_paths and parse_trace(["synthetic"]).kind == \
        "synthetic"


@pytest.mark.parametrize("values, message", [
    (["agentx", "bundled"], "a word (agentx, bundled, synthetic) stands alone"),
    (["synthetic", "x.json"], "a word (agentx, bundled, synthetic) stands alone"),
])
def test_trace_words_stand_alone(values, message) -> None:
    from kvbench.errors import WorkloadError

    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_trace(values)
