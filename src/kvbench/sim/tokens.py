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
from collections.abc import Sequence
from dataclasses import dataclass


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
