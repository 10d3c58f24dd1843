"""Prefix identity for the simulated server: requests become pseudo-tokens and page keys.

The simulator has no real tokenizer. By default a text prompt is cut into word tokens: a run
of word characters with the whitespace before it, or one punctuation character, or trailing
whitespace. That is exact for the replay client's synthesised prompts (one vocabulary word
with a leading space per token) and near a BPE count for prose. With `chars_per_token` > 0,
fixed-size character chunks are used instead. Token-id prompts (`prompt: [int, ...]`) are
used as they are. Every full page of `page_tokens` tokens gets a key: the 64-bit BLAKE2b
digest of its content. Keys sit in the radix tree under their parent page, so a key stands
for the whole prefix before it and two prompts share exactly the pages of their identical
leading tokens. A partial last page has no key and never hits, as in SGLang with a page size
above one.

Prompts synthesised from trace hash ids repeat identical text for identical ids, so their
shared leading blocks hit here; a page that straddles the first differing block does not."""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True, slots=True)
class Prompt:
    num_tokens: int
    keys: list[int]  # one per full page


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


_WORD_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def text_prompt(text: str, page_tokens: int, chars_per_token: int = 0) -> Prompt:
    if chars_per_token <= 0:
        tokens = _WORD_TOKEN.findall(text)
        keys = [_digest("".join(tokens[i:i + page_tokens]).encode("utf-8", "surrogatepass"))
                for i in range(0, len(tokens) - page_tokens + 1, page_tokens)]
        return Prompt(max(1, len(tokens)), keys)
    num_tokens = max(1, math.ceil(len(text) / chars_per_token))
    page_chars = page_tokens * chars_per_token
    full_pages = len(text) // page_chars
    keys = [_digest(text[i * page_chars:(i + 1) * page_chars].encode("utf-8", "surrogatepass"))
            for i in range(full_pages)]
    return Prompt(num_tokens, keys)


def token_prompt(token_ids: Sequence[int], page_tokens: int) -> Prompt:
    full_pages = len(token_ids) // page_tokens
    keys = [_digest(repr(tuple(token_ids[i * page_tokens:(i + 1) * page_tokens])).encode())
            for i in range(full_pages)]
    return Prompt(max(1, len(token_ids)), keys)


def chat_text(messages: list[dict]) -> str:
    """A chat conversation flattened the way a chat template would: role, then content."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content}\n")
    return "".join(parts)


@dataclass(slots=True)
class _Tokenized:
    text: str
    ends: array  # each word token's end offset in the text
    page_tokens: int
    keys: list[int]


# a prompt sharing fewer leading characters than this with every kept one is tokenized whole
_MIN_SHARED_CHARS = 1024


def _shared_length(a: str, b: str, start: int, chunk: int = 4096) -> int:
    """How many leading characters `a` and `b` share, given the first `start` are: chunk by
    chunk (C compares of small slices), then halving inside the first differing chunk."""
    end = min(len(a), len(b))
    lo = start
    while lo < end and a[lo:lo + chunk] == b[lo:lo + chunk]:
        lo += chunk
    hi = min(lo + chunk, end)
    lo = min(lo, end)
    while lo < hi:  # a[:lo] == b[:lo]; the first difference is before hi
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PromptTokens:
    """`text_prompt(text, page_tokens)` for word tokens, reusing the tokens of the kept prompt
    that shares the longest leading text with this one. An agent's turn repeats the whole
    conversation before it, and the word tokenizer's regex costs ~120 ns a token: 6 ms for a
    44K-token prompt, on every turn, on the server's one event loop, while the replay client
    on the same core waits to send.

    The regex scans without memory between matches, so the tokens of the shared text are this
    text's tokens too, up to the last one that ends strictly inside it (a token ending right
    at the first differing character might run on); the scan resumes from there. Pages made
    only of reused tokens keep their keys. `keep` prompts are kept, the least recent dropped."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._kept: OrderedDict[int, _Tokenized] = OrderedDict()
        self._ids = 0

    def _best(self, text: str) -> tuple[_Tokenized | None, int]:
        """The kept prompt sharing the longest leading text with `text`, and that length."""
        head = text[:_MIN_SHARED_CHARS]
        best, best_len = None, 0
        for old in self._kept.values():
            if len(old.text) < _MIN_SHARED_CHARS or old.text[:_MIN_SHARED_CHARS] != head:
                continue
            shared = _shared_length(text, old.text, _MIN_SHARED_CHARS)
            if shared > best_len:
                best, best_len = old, shared
        return best, best_len

    def prompt(self, text: str, page_tokens: int) -> Prompt:
        old, shared = self._best(text)
        if old is None:
            reused, ends, keys = 0, array("q"), []
        else:
            reused = bisect_left(old.ends, shared)  # tokens ending before the first difference
            ends = old.ends[:reused]
            keys = old.keys[:reused // page_tokens] if old.page_tokens == page_tokens else []
        pos = ends[-1] if reused else 0
        ends.extend(accumulate(map(len, _WORD_TOKEN.findall(text, pos)), initial=pos))
        if reused:
            del ends[reused]  # `initial` repeats the resume point
        else:
            del ends[0]
        for i in range(len(keys), len(ends) // page_tokens):
            start = ends[i * page_tokens - 1] if i else 0
            keys.append(_digest(text[start:ends[(i + 1) * page_tokens - 1]].encode(
                "utf-8", "surrogatepass")))
        self._ids += 1
        self._kept[self._ids] = _Tokenized(text, ends, page_tokens, keys)
        if len(self._kept) > self.keep:
            self._kept.popitem(last=False)
        return Prompt(max(1, len(ends)), list(keys))
