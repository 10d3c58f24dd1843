"""The ideal-cache ceiling, prompt-size agreement and the warm-cache guard, on hand-built
turns and records (values computed by hand in the comments)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvbench.replay.checks import ideal_hit_rate, prompt_agreement, warm_cache_guard
from kvbench.replay.ideal import IdealCache
from kvbench.workload.session import Turn


def turn(n: int, ids: tuple[int, ...], bs: int = 64) -> Turn:
    return Turn(n, 10, ids, bs)


def test_ideal_cache_follows_prefix_chains_and_partial_blocks():
    c = IdealCache()
    assert c.observe(turn(150, (1, 2, 3)), "s") == 0  # blocks 64 + 64 + 22 (partial)
    # 64 + 64 + the 22 tokens of block 3 seen so far; the match ends inside block 3
    assert c.observe(turn(200, (1, 2, 3, 4)), "s") == 150
    assert c.observe(turn(200, (1, 2, 3, 4)), "other") == 0  # ids mean content per namespace
    assert c.observe(turn(128, (1, 5)), "s") == 64  # 1 shared, then a new branch
    assert c.observe(turn(128, (5, 1)), "s") == 0  # same ids in another order: no prefix
    assert c.observe(turn(64, (1,)), "s") == 63  # one token is always computed


def test_a_tree_marker_shares_the_blocks_before_it_and_nothing_after_it_across_trees():
    """The AgentX profile's cache-bust marker (19 tokens here) sits after the system
    message's 2 blocks: another tree (another marker) shares those 128 tokens only; the
    same tree's next turn shares them, the marker and its own history."""
    c = IdealCache()
    assert c.observe(turn(256, (1, 2, 3, 4)), "s", "[rid:a]", 2, 19) == 0
    assert c.observe(turn(256, (1, 2, 3, 4)), "s", "[rid:b]", 2, 19) == 128  # other tree
    # tree a's next turn: system 128 + marker 19 + blocks 3, 4 (128) + nothing of block 5
    assert c.observe(turn(320, (1, 2, 3, 4, 5)), "s", "[rid:a]", 2, 19) == 128 + 19 + 128
    # the same marker after other blocks: the system differs, nothing after it is shared
    assert c.observe(turn(256, (1, 9, 3, 4)), "s", "[rid:a]", 2, 19) == 64
    # a marker before the first block (no system message): its tree's prefix only
    assert c.observe(turn(128, (7, 8)), "s", "[rid:c]", 0, 19) == 0
    assert c.observe(turn(128, (7, 8)), "s", "[rid:c]", 0, 19) == 128 + 19 - 1
    assert c.observe(turn(128, (7, 8)), "s", "[rid:d]", 0, 19) == 0


class ChainCache:
    """The ceiling's definition, block by block: each chain of ids (a prefix) with the most
    tokens of its last block seen (the radix tree's reference; kvbench's walk before it)."""

    def __init__(self) -> None:
        self.seen: dict[tuple, int] = {}

    def observe(self, t: Turn, namespace: str) -> int:
        hit, matching, left = 0, True, t.input_tokens
        for i, _ in enumerate(t.hash_ids):
            if left <= 0:
                break
            n = min(t.block_tokens, left)
            key = (namespace, t.block_tokens, *t.hash_ids[:i + 1])
            seen = self.seen.get(key, 0)
            if matching:
                hit += min(seen, n)
                matching = seen >= n
            self.seen[key] = max(seen, n)
            left -= n
        return min(hit, max(0, t.input_tokens - 1))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 1), max_size=5), st.integers(-3, 3),
                          st.sampled_from([2, 4]), st.sampled_from(["a", "b"])),
                max_size=30),
       st.booleans())
# an edge split below a partly seen block, whose rest is then reached in full
@example([([0, 1, 1], -3, 4, "a"), ([0, 0], 0, 4, "a"), ([0, 1, 1], 0, 4, "a")], False)
def test_the_radix_tree_serves_what_the_chain_of_every_block_serves(turns, as_runs):
    """Prompts that share prefixes, diverge, end in partly seen blocks, go past them, in two
    namespaces and block sizes, as tuples or as runs of ids: the same ceiling per turn."""
    from kvbench.workload.blocks import Blocks

    radix, chains = IdealCache(), ChainCache()
    for steps, extra, bs, ns in turns:
        ids = tuple(itertools.accumulate(steps))  # small steps: long shared prefixes
        n = max(1, len(ids) * bs + extra)
        held = Blocks([(h, h + 1) for h in ids]) if as_runs else ids
        assert radix.observe(Turn(n, 1, held, bs), ns) == chains.observe(Turn(n, 1, ids, bs),
                                                                          ns)


def test_the_ceiling_holds_an_edge_per_stream_not_per_turn_or_block():
    """A context growing over 60 turns (its last block partial each time), then a subagent
    that shares its first blocks: the tree holds the shared prefix and the two streams' own
    blocks, whatever the turns and blocks were."""
    c = IdealCache()
    ids = tuple(range(10_000))
    for k in range(1, 61):
        c.observe(turn(k * 100 * 64 + 30, ids[:k * 100 + 1]), "s")
    assert c.observe(turn(20 * 64, (*ids[:10], 50_000, 50_001)), "s") == 10 * 64
    edges, stack = 0, list(c._roots.values())
    while stack:
        edge = stack.pop()
        edges += 1
        stack.extend(edge.below.values())
    assert edges == 4  # the root, the shared prefix, the context's rest, the subagent's own


def rec(session: str, turn_no: int, sent: int, server: int, cached: int, ideal: int) -> dict:
    return {"session_id": session, "turn": turn_no, "status": "ok", "sent_prompt_tokens": sent,
            "prompt_tokens": server, "cached_tokens": cached, "ideal_cached_tokens": ideal}


def test_prompt_agreement_and_ceiling():
    ok = [rec("a", 0, 1000, 1006, 0, 0), rec("a", 1, 2000, 2006, 900, 1000)]
    agree = prompt_agreement(ok)
    assert agree["sent_tokens"] == 3000 and agree["server_tokens"] == 3012
    assert agree["deviation"] == 12 / 3000 and agree["agrees"] is True
    assert ideal_hit_rate(ok) == 1000 / 3000
    # a tokenizer that splits every word into four: the server sees 4x the tokens
    assert prompt_agreement([rec("a", 0, 1000, 4000, 0, 0)])["agrees"] is False


def test_a_chat_template_on_short_prompts_is_not_a_disagreement():
    """256-token prompts with Qwen3's 15-token template on vLLM (measured on the H200): +5.9%,
    more than the 2% a long prompt absorbs, but a fixed 15 per request is the template."""
    short = [rec("a", t, 256, 271, 0, 0) for t in range(10)]
    agree = prompt_agreement(short)
    assert agree["deviation"] == pytest.approx(150 / 2560) and agree["agrees"] is True
    # beyond 32 per request it is not a template: 256 sent, 300 counted
    assert prompt_agreement([rec("a", 0, 256, 300, 0, 0)])["agrees"] is False


def test_warm_cache_guard_flags_a_first_request_hitting_an_earlier_run():
    fresh = [rec("a", 0, 1000, 1006, 0, 0), rec("b", 0, 1000, 1006, 512, 512),
             rec("a", 1, 2000, 2006, 1990, 1000)]  # later turns are not checked
    assert warm_cache_guard(fresh) == {"checked_sessions": 2, "suspect_sessions": 0,
                                       "passed": True, "suspects": []}
    # 6 template tokens + 16 slack are allowed on a first request that could hit nothing
    warm = [rec("a", 0, 1000, 1006, 22, 0), rec("b", 0, 1000, 1006, 960, 0)]
    got = warm_cache_guard(warm)
    assert got["passed"] is False and got["suspect_sessions"] == 1
    assert got["suspects"][0] == {"session_id": "b", "turn": 0, "cached_tokens": 960,
                                  "allowed_tokens": 22}
