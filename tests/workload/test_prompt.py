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
