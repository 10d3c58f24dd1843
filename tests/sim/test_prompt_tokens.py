"""The served prompt's word tokens and page keys, reusing the tokens of a kept prompt that
shares its leading text (sim/tokens.py PromptTokens): always what tokenizing the whole text
gives, whatever the texts hold, how they relate, the page size or how many are kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.sim.tokens import PromptTokens, _shared_length, text_prompt

# words, punctuation, whitespace runs, non-ASCII letters, a lone surrogate, chat markers
_PIECES = st.sampled_from([" the", " cache", "token", "ab", "(x)", " a.b", "  \n", "\t",
                           "x_1", " é", "😀", "!", "  ", "\n\n", "<|", "\ud800"])
_TEXT = st.lists(_PIECES, max_size=400).map("".join)
# how a next prompt relates to the last: appended to (an agent's next turn), cut and
# continued otherwise (an edited history), or a new one
_STEP = st.tuples(st.sampled_from(["append", "cut", "new"]), _TEXT, st.floats(0, 1))


def _next(last: str, step: tuple) -> str:
    how, text, where = step
    if how == "append":
        return last + text
    if how == "cut":
        return last[:int(where * len(last))] + text
    return text


@settings(max_examples=250, deadline=None)
@given(first=_TEXT, steps=st.lists(_STEP, min_size=1, max_size=6),
       page=st.sampled_from([1, 2, 7, 16, 64]), keep=st.sampled_from([1, 3, 16]))
def test_the_same_tokens_and_keys_as_the_whole_text(first, steps, page, keep):
    # long shared heads, so that kept prompts are reused (below 1,024 shared characters a
    # prompt is tokenized whole)
    head = " the cache" * 120
    prompts, text = PromptTokens(keep=keep), head + first
    for step in [("append", "", 0.0), *steps]:
        text = _next(text, step)
        whole, mine = text_prompt(text, page), prompts.prompt(text, page)
        assert (mine.num_tokens, mine.keys) == (whole.num_tokens, whole.keys)


@given(a=st.text(alphabet="ab", max_size=60), b=st.text(alphabet="ab", max_size=60),
       chunk=st.sampled_from([1, 3, 8, 4096]))
def test_shared_length_is_the_common_prefix(a, b, chunk):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert _shared_length(a, b, 0, chunk) == n


def test_a_next_turn_is_not_tokenized_again(monkeypatch):
    """A 44K-token conversation and its next turn: the kept tokens leave only the turn's new
    text to the tokenizer's regex and only its new pages to hash (the work counted, not timed:
    7.4 vs 0.8 ms measured here), with the same prompt as tokenizing it whole."""
    from kvbench.sim import tokens

    scanned, hashed = [], []
    regex, digest = tokens._WORD_TOKEN, tokens._digest

    class Counted:
        def findall(self, text: str, pos: int = 0) -> list[str]:
            scanned.append(len(text) - pos)
            return regex.findall(text, pos)

    monkeypatch.setattr(tokens, "_WORD_TOKEN", Counted())
    monkeypatch.setattr(tokens, "_digest", lambda b: hashed.append(1) or digest(b))
    history = " word (x) a.b" * 15_000
    turn = history + " more" * 2_000
    prompts = PromptTokens()
    prompts.prompt(history, 64)
    scanned.clear()
    hashed.clear()
    mine = prompts.prompt(turn, 64)
    new_tokens = 2_000  # " more" is one word token
    assert len(scanned) == 1 and scanned[0] <= len(turn) - len(history) + 16, scanned
    assert 0 < len(hashed) <= new_tokens // 64 + 2, len(hashed)  # the new pages, one redone
    whole = text_prompt(turn, 64)
    assert (mine.num_tokens, mine.keys) == (whole.num_tokens, whole.keys)
