"""Prompt synthesis from hash ids.

Each (namespace, block id) maps deterministically to a block of content of exactly the block's
token count: a sequence drawn from a pool of vocabulary words that each encode to one token and
re-encode stably when concatenated (each starts with a space, where every pre-tokenizer splits).
Equal leading blocks therefore give byte-identical prompt prefixes, which is what lets a prefix
cache recognise the trace's reuse. A per-run marker replaces the first tokens of every prompt so a
run cannot hit KV cached by an earlier run, while sessions of one run still share prefixes.

Without a tokenizer, one "token" is one common English word with a leading space: close to one
token for most BPE vocabularies and exact for the word-counting test server; the server's
reported usage stays the truth either way."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kvbench.errors import WorkloadError
from kvbench.workload.session import Turn

MARKER_TOKENS = 8
_WORD_RE = re.compile(r"^ [a-z]{2,12}$")
_FALLBACK_TEXT = (
    "the of and to in is it that for on with as was at by be this are from or have an they "
    "which one you had not but what all were when we there can said each she do how their "
    "if will up other about out many then them these so some her would make like him into "
    "time has look two more write go see number no way could people my than first water "
    "been call who oil its now find long down day did get come made may part"
)
_FALLBACK_WORDS = _FALLBACK_TEXT.split()


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str | None  # set for chat and text completions
    token_ids: list[int] | None  # set when completions are sent as token ids
    num_tokens: int  # tokens of content synthesised (before any chat template)


def _seed(*parts: object) -> int:
    key = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


MIN_WORDS = 16
STABILITY_SAMPLES = 4  # word sequences drawn as prompts draw them, each must re-encode exactly
STABILITY_TOKENS = 256


class Vocabulary:
    """The pool of single-token words prompts are made of, for one tokenizer (or none).

    A tokenizer without enough single-token words, or whose words merge when concatenated,
    cannot carry text prompts of exact size: with `token_ids` (completions endpoint) the pool
    switches to plain token ids (exact for any tokenizer, `switched` says why); otherwise it
    is refused, since the server would see other sizes and other reuse than the trace's."""

    def __init__(self, tokenizer: str | None = None, *, token_ids: bool = False) -> None:
        self.name = tokenizer
        self.switched: str | None = None
        if tokenizer is None:
            self.words = [" " + w for w in _FALLBACK_WORDS]
            self.ids: list[int] | None = None
            return
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer)
        except Exception as e:  # transformers raises many kinds for a bad name or path
            raise WorkloadError(
                f"tokenizer {tokenizer!r} cannot be loaded: {e}",
                hint="pass a local tokenizer directory or an HF id available offline",
            ) from e
        words: list[str] = []
        ids: list[int] = []
        added = tok.get_added_vocab()  # special and padding tokens: never prompt words
        for piece, tid in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
            if piece in added:
                continue
            # byte-level BPE spells a leading space "Ġ", SentencePiece "▁" (and its decode of
            # a lone token drops the space), so build the text from the piece itself
            text = " " + piece[1:] if piece[:1] in ("Ġ", "▁") else tok.decode([tid])
            if _WORD_RE.match(text) and tok.encode(text, add_special_tokens=False) == [tid]:
                words.append(text)
                ids.append(tid)
            if len(words) >= 4096:
                break
        problem = None
        if len(words) < MIN_WORDS:
            problem = f"has only {len(words)} single-token words (prompt synthesis needs " \
                      f"{MIN_WORDS})"
        else:
            self.words, self.ids = words, ids
            for seed in range(STABILITY_SAMPLES):
                sample = "".join(words[i] for i in self.draw(seed, STABILITY_TOKENS))
                got = len(tok.encode(sample, add_special_tokens=False))
                if got != STABILITY_TOKENS:
                    problem = (f"re-encodes {STABILITY_TOKENS} concatenated words as {got} "
                               "tokens")
                    break
        if problem is None:
            return
        if not token_ids:
            raise WorkloadError(
                f"tokenizer {tokenizer!r} {problem}: text prompts would not have the sizes "
                "and reuse of the trace",
                hint="--endpoint completions sends token ids, exact for any tokenizer")
        special = set(tok.all_special_ids) | set(added.values())
        plain = [t for t in sorted(tok.get_vocab().values()) if t not in special][:4096]
        self.words, self.ids = [tok.decode([t]) for t in plain], plain
        self.switched = f"tokenizer {tokenizer!r} {problem}: prompts are plain token ids"

    def draw(self, seed: int, n: int) -> list[int]:
        """n indices into the pool, a pure function of `seed` (one SHAKE call: fast enough
        that a first-seen 100K-token context costs milliseconds, not a stalled event loop)."""
        raw = hashlib.shake_128(seed.to_bytes(8, "little")).digest(2 * n)
        size = len(self.words)
        return [v % size for v in memoryview(raw).cast("H")]


class PromptBuilder:
    """Builds prompts for turns. Rendered blocks are cached (LRU): a session's turns share all
    but their last few blocks, so a 100K-token prompt costs a join, not a synthesis."""

    def __init__(
        self,
        vocab: Vocabulary,
        run_marker: str,
        *,
        token_ids: bool = False,
        cache_tokens: int = 1 << 22,
    ) -> None:
        if token_ids and vocab.ids is None:
            raise WorkloadError("token-id prompts need a tokenizer", hint="pass --tokenizer")
        self.vocab = vocab
        self.token_ids = token_ids
        self.marker = vocab.draw(_seed("marker", run_marker), MARKER_TOKENS)
        self._cache: OrderedDict[tuple, tuple[list[int], str | list[int]]] = OrderedDict()
        # bounded by tokens, not blocks: a trace's blocks are 1 to 2^20 tokens, so a count of
        # blocks bounds no memory (4M tokens: 65,536 of the Claude Code traces' 64-token ones)
        self._cache_tokens = cache_tokens
        self._cached = 0

    def _render(self, idx: list[int]) -> str | list[int]:
        if self.token_ids:
            ids = self.vocab.ids
            assert ids is not None
            return [ids[i] for i in idx]
        words = self.vocab.words
        return "".join([words[i] for i in idx])

    def _block(self, key: tuple, n: int) -> tuple[list[int], str | list[int]]:
        hit = self._cache.get(key)
        if hit is None:
            idx = self.vocab.draw(_seed(*key), n)
            hit = (idx, self._render(idx))
            self._cache[key] = hit
            self._cached += n
            while self._cached > self._cache_tokens and len(self._cache) > 1:
                self._cached -= len(self._cache.popitem(last=False)[1][0])
        else:
            self._cache.move_to_end(key)
        return hit

    def missing(self, turn: Turn, namespace: str) -> list[int]:
        """Hash ids of `turn` whose blocks are not rendered yet."""
        bs = turn.block_tokens
        return [h for h in turn.hash_ids if (namespace, h, bs) not in self._cache]

    def warm(self, namespace: str, hash_ids: list[int], block_tokens: int) -> None:
        """Render these blocks now (callers slice a long list to keep each call short)."""
        for h in hash_ids:
            self._block((namespace, h, block_tokens), block_tokens)

    def indices(self, turn: Turn, namespace: str, tail_key: object) -> list[int]:
        """Pool indices of the whole prompt (for tests and tools; `build` is the fast path)."""
        return [i for part in self._parts(turn, namespace, tail_key) for i in part[0]]

    def _parts(self, turn: Turn, namespace: str, tail_key: object) -> list[tuple[list[int], Any]]:
        bs, n = turn.block_tokens, turn.input_tokens
        parts: list[tuple[list[int], Any]] = []
        left = n
        for h in turn.hash_ids:
            idx, rendered = self._block((namespace, h, bs), bs)
            if left < bs:  # the last block is partial: its content is a prefix of the full block
                parts.append((idx[:left], None))
                left = 0
                break
            parts.append((idx, rendered))
            left -= bs
        if left > 0:
            parts.append((self.vocab.draw(_seed(namespace, "tail", tail_key), left), None))
        # the run marker replaces the first tokens (so the count stays exact); merge leading
        # parts until they hold the marker (only tiny blocks need more than one)
        m = min(MARKER_TOKENS, n)
        head: list[int] = []
        k = 0
        while len(head) < m:
            head.extend(parts[k][0])
            k += 1
        head[:m] = self.marker[:m]
        parts[:k] = [(head, None)]
        return parts

    def build(self, turn: Turn, namespace: str, tail_key: object) -> Prompt:
        parts = self._parts(turn, namespace, tail_key)
        rendered = [r if r is not None else self._render(idx) for idx, r in parts]
        n = sum(len(idx) for idx, _ in parts)
        if self.token_ids:
            flat: list[int] = []
            for r in rendered:
                flat.extend(r)  # type: ignore[arg-type]
            return Prompt(None, flat, n)
        return Prompt("".join(rendered), None, n)  # type: ignore[arg-type]
