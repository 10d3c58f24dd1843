"""Prompt synthesis from hash ids.

Each (namespace, block id) maps deterministically to a block of content of exactly the block's
token count: a sequence drawn from a pool of vocabulary words that each encode to one token and
re-encode stably when concatenated (each starts with a space, where every pre-tokenizer splits).
Equal leading blocks therefore give byte-identical prompt prefixes, which is what lets a prefix
cache recognise the trace's reuse. A per-run marker replaces the first tokens of every prompt so a
run cannot hit KV cached by an earlier run, while sessions of one run still share prefixes. Under
the AgentX profile a chat prompt carries the harness's cache-bust marker instead (`tree_marker`):
text put before the first user message, one per session tree, which adds its tokens.

Without a tokenizer, one "token" is one common English word with a leading space: close to one
token for most BPE vocabularies and exact for the word-counting test server; the server's
reported usage stays the truth either way."""

from __future__ import annotations

import hashlib
import re
import weakref
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import orjson

from kvbench.errors import WorkloadError
from kvbench.workload.blocks import common_prefix
from kvbench.workload.messages import ChatLayout, marker_segment
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


@dataclass(frozen=True, slots=True)
class PromptJson:
    """A prompt as the JSON value a request body carries (a string of words, or an array of
    token ids), in pieces to be joined where the body is assembled: most of them are the
    segments of rendered blocks a stream keeps (`PromptStream.span`), shared and never
    copied until then."""

    # a tuple: a tuple of bytes leaves the collector's view at its first collection (a list
    # alive while its request is in flight would be walked by every young collection)
    pieces: tuple[bytes, ...]
    num_tokens: int
    # the pieces are a whole chat message list (workload/messages.py), not one string
    messages: bool = False
    # the tree's cache-bust marker, put before the first user message (`tree_marker`), with
    # the whole blocks before it and its tokens (counted in `num_tokens`); None: none sent
    marker: str | None = None
    marker_at_block: int = 0
    marker_tokens: int = 0
    num_bytes: int = field(init=False)  # of the pieces

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_bytes", sum(map(len, self.pieces)))


@dataclass(slots=True, weakref_slot=True)
class PromptStream:
    """What one request stream (a session's root or a subagent) keeps between its turns: the
    rendered leading whole blocks of `ids`, its latest turn's hash ids. A turn repeats its
    predecessor's context and adds a little, so the next prompt renders only the blocks it
    adds; the stream holds one context, whatever its history.

    The blocks are held as segments: each a run of up to `SEGMENT_BLOCKS` consecutive blocks
    rendered together, joined into one bytes object. A 12K-block context is then ~200
    objects, not 12K: each request's prompt refers to them (`span`), the collector visits
    each of them wherever a container holding them is young, and every visit to a block
    scattered over the heap was a cache miss (a young collection that met a few prompts walked
    226K such references for 44 ms of CPU time)."""

    namespace: str = ""
    block_tokens: int = 0
    ids: Sequence[int] = ()
    segments: list[bytes] = field(default_factory=list)
    # each segment's first block, and each block's byte offset in its segment (arrays of
    # machine integers: nothing for the collector to visit)
    starts: array = field(default_factory=lambda: array("q"))
    offsets: array = field(default_factory=lambda: array("q"))
    rendered_ns: int = 0  # when its blocks were last brought up to date (perf_counter_ns)
    # the only live stream of its namespace when it took it: its blocks bypass the shared
    # cache (`PromptBuilder.sync`)
    alone: bool = False

    @property
    def blocks(self) -> int:
        """Whole blocks rendered."""
        return len(self.offsets)

    def add(self, blocks: list[bytes]) -> None:
        """Append rendered blocks, as one segment."""
        if not blocks:
            return
        self.starts.append(len(self.offsets))
        self.offsets.extend(accumulate(map(len, blocks[:-1]), initial=0))
        self.segments.append(blocks[0] if len(blocks) == 1 else b"".join(blocks))

    def span(self, first: int, stop: int) -> list[bytes]:
        """The bytes of blocks `first` to `stop` (exclusive): whole segments, the two ends
        sliced where the span starts or stops inside one."""
        if first >= stop:
            return []
        starts, offsets, segs = self.starts, self.offsets, self.segments
        i = bisect_right(starts, first) - 1
        j = bisect_right(starts, stop - 1) - 1
        start = offsets[first]
        last = segs[j]
        end = (len(last) if stop == len(offsets) or (j + 1 < len(starts)
                                                     and starts[j + 1] == stop)
               else offsets[stop])
        if i == j:
            return [last if start == 0 and end == len(last) else last[start:end]]
        return [segs[i][start:] if start else segs[i], *segs[i + 1:j],
                last if end == len(last) else last[:end]]

    def truncate(self, keep: int) -> None:
        """Keep the first `keep` blocks (a segment cut inside is copied up to its cut)."""
        if keep >= len(self.offsets):
            return
        starts, segs = self.starts, self.segments
        j = bisect_right(starts, keep) - 1 if keep > 0 else 0
        if keep <= 0 or starts[j] == keep:
            del segs[j:], starts[j:]
        else:
            segs[j] = segs[j][:self.offsets[keep]]
            del segs[j + 1:], starts[j + 1:]
        del self.offsets[max(keep, 0):]


def tree_marker(run_id: str, pass_no: int, lane: int, trace_id: str) -> str:
    """The cache-bust marker agentx-harness 1.0.12 puts before the first user message of
    every request of one session tree (root, subagents, split chains; warm-up and profiling
    alike): `[rid:<12 hex>]` and two newlines, the hex the start of the SHA-256 of
    `run:pass:lane:trace` (aiperf/timing/strategies/cache_bust.py:106-111
    `build_cache_bust_marker`, target `first_turn_prefix` as the AgentX scenario requires:
    common/scenario/inferencex_agentx_mvp.py:38). `run_id` is random per run there
    (`uuid4().hex[:12]`, cli_runner/__init__.py:108) and kvbench's run marker here; `pass_no`
    counts the trees of one trace in the run (`recycle_pass`, cache_bust.py:69-71); `lane` is
    the tree's lane (`trajectory_index`); `trace_id` the trace's id, the same for every stream
    of the tree (`base_trace_id`, cache_bust.py:29-36)."""
    digest = hashlib.sha256(f"{run_id}:{pass_no}:{lane}:{trace_id}".encode()).hexdigest()
    return f"[rid:{digest[:12]}]\n\n"


def _seed(*parts: object) -> int:
    return int.from_bytes(_seed_bytes("\x1f".join(str(p) for p in parts)), "little")


def _seed_bytes(key: str) -> bytes:
    """`_seed` of the parts `key` joins, as the 8 bytes `draw_values` hashes (little-endian:
    `_seed(...).to_bytes(8, "little")`)."""
    return hashlib.blake2b(key.encode(), digest_size=8).digest()


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
        self._tok = None
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
        self._tok = tok
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

    def count(self, text: str) -> int:
        """Tokens of free text (a cache-bust marker): the tokenizer's count, or without one
        its whitespace-separated words (a word is a token to kvbench and the word-counting
        server)."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False))

    def draw(self, seed: int, n: int) -> list[int]:
        """n indices into the pool, a pure function of `seed` (one SHAKE call: fast enough
        that a first-seen 100K-token context costs milliseconds, not a stalled event loop)."""
        size = len(self.words)
        return [v % size for v in draw_values(seed, n)]


def draw_values(seed: int, n: int) -> memoryview:
    """The n 16-bit values `Vocabulary.draw` reduces modulo the pool's size. SHAKE is an
    extendable-output function: the first k values of n are the k values of k, so a block's
    leading tokens are a prefix of the whole block."""
    return _draw(seed.to_bytes(8, "little"), n)


def _draw(seed_bytes: bytes, n: int) -> memoryview:
    return memoryview(hashlib.shake_128(seed_bytes).digest(2 * n)).cast("H")


# Whole blocks kept for every stream of a namespace to share (a system prefix sessions share
# in a global namespace, the blocks a subagent shares with its parent): about 8 MB of
# 64-token blocks. A stream's own context is in its `PromptStream`, so this cache is never
# what a turn's prompt depends on being large. A stream alone in its namespace (a session of
# a trace whose hash ids are local to it, as AgentX's: 1.2-12K blocks a context) renders
# past it: at 512 such sessions the cache held none of the 1.37M blocks rendered long enough
# to be read again (1.35M evictions), so every block paid the lookup, the insert and the
# eviction for nothing.
SHARED_BLOCKS = 16384
# ...and bounded by tokens too: a trace's blocks are 1 to 2^20 tokens, so a count of blocks
# alone bounds no memory (16,384 blocks of 2^20 tokens would be 16 G tokens)
SHARED_TOKENS = SHARED_BLOCKS * 64
# Blocks a stream's segment holds at most (`PromptStream.add`): what cutting a context inside
# a segment copies (~22 KB of 64-token blocks), and a 12K-block context in ~200 objects
SEGMENT_BLOCKS = 64


# a namespace's owner once two streams have taken it (`PromptBuilder._take`)
_SHARED = PromptStream()

# the opening of a message, up to its content's first character
_OPEN = {role: orjson.dumps({"role": role, "content": ""})[:-2] for role in
         ("system", "user", "assistant")}


class PromptBuilder:
    """Builds prompts for turns, as JSON pieces (`json`, the replay's path) or whole
    (`build`). A block renders as one join over a table from the draw's 16-bit values to
    JSON-escaped words (or token ids) with their separator; JSON escapes character by
    character, so escaped pieces join to the escaping of the joined text."""

    def __init__(
        self,
        vocab: Vocabulary,
        run_marker: str,
        *,
        token_ids: bool = False,
        shared_blocks: int = SHARED_BLOCKS,
        shared_tokens: int = SHARED_TOKENS,
    ) -> None:
        if token_ids and vocab.ids is None:
            raise WorkloadError("token-id prompts need a tokenizer", hint="pass --tokenizer")
        self.vocab = vocab
        self.token_ids = token_ids
        self.run_id = run_marker  # the run's part of each tree's marker (`tree_marker`)
        self.marker = vocab.draw(_seed("marker", run_marker), MARKER_TOKENS)
        if token_ids:
            assert vocab.ids is not None
            self._sep, self._open, self._close = b",", b"[", b"]"
            units = [str(i).encode() for i in vocab.ids]
        else:
            self._sep, self._open, self._close = b"", b'"', b'"'
            units = [orjson.dumps(w)[1:-1] for w in vocab.words]
        size = len(units)
        # indexed by a pool index (< size) or directly by a drawn 16-bit value
        self._units = [self._sep + units[v % size] for v in range(1 << 16)]
        self._shared: OrderedDict[tuple, bytes] = OrderedDict()
        self._shared_blocks = shared_blocks
        self._shared_tokens = shared_tokens
        self._shared_now = 0  # tokens in the shared blocks
        # each namespace's stream while it is the only one to have taken it (weak: a
        # finished session's stream leaves its namespace free)
        self._owners: weakref.WeakValueDictionary[str, PromptStream] = \
            weakref.WeakValueDictionary()

    # -- blocks ------------------------------------------------------------------------------
    def _render(self, idx: Sequence[int]) -> bytes:
        return b"".join(map(self._units.__getitem__, idx))

    def _own(self, prefix: str, ids: Sequence[int], bs: int) -> list[bytes]:
        """Whole blocks `ids`, rendered (`prefix`: the namespace and the separator): every
        block a stream holds is rendered here, past the shared cache for a stream alone in
        its namespace."""
        units = self._units.__getitem__
        draw, seed, join = _draw, _seed_bytes, b"".join
        tail = f"\x1f{bs}"
        return [join(map(units, draw(seed(f"{prefix}{h!s}{tail}"), bs))) for h in ids]

    def _block(self, namespace: str, h: int, bs: int) -> bytes:
        key = (namespace, h, bs)
        hit = self._shared.get(key)
        if hit is None:
            hit = self._own(f"{namespace}\x1f", (h,), bs)[0]
            self._shared[key] = hit
            self._shared_now += bs
            while self._shared and (len(self._shared) > self._shared_blocks
                                    or self._shared_now > self._shared_tokens):
                self._shared_now -= self._shared.popitem(last=False)[0][2]
        else:
            self._shared.move_to_end(key)
        return hit

    @staticmethod
    def _layout(turn: Turn) -> tuple[int, int]:
        """(whole blocks, tokens after them): the prompt is `whole` blocks, then the first
        tokens of the next block (a partial block) or, past the hashed blocks, an unhashed
        tail."""
        whole = min(len(turn.hash_ids), turn.input_tokens // turn.block_tokens)
        return whole, turn.input_tokens - whole * turn.block_tokens

    def sync(self, stream: PromptStream, turn: Turn, namespace: str,
             limit: int | None = None) -> int:
        """Bring `stream` to `turn`'s whole blocks, rendering at most `limit` of those it
        lacks (keeping those it shares with the stream's last turn); returns how many are
        still missing."""
        bs, ids = turn.block_tokens, turn.hash_ids
        if stream.ids is not ids or stream.namespace != namespace or \
                stream.block_tokens != bs:
            same = stream.namespace == namespace and stream.block_tokens == bs
            have = stream.blocks
            stream.truncate(min(common_prefix(stream.ids, ids), have)
                            if same and have else 0)
            if stream.namespace != namespace:
                stream.alone = self._take(stream, namespace)
            stream.ids, stream.namespace, stream.block_tokens = ids, namespace, bs
        whole, _ = self._layout(turn)
        have = stream.blocks
        if have >= whole:
            return 0
        end = whole if limit is None else min(whole, have + limit)
        prefix = f"{namespace}\x1f"
        for a in range(have, end, SEGMENT_BLOCKS):
            got = ids[a:min(end, a + SEGMENT_BLOCKS)]
            stream.add(self._own(prefix, got, bs) if stream.alone
                       else [self._block(namespace, h, bs) for h in got])
        return whole - end

    def _take(self, stream: PromptStream, namespace: str) -> bool:
        """Whether `stream` is the only live stream to have taken `namespace` (then its blocks
        are its own). A second stream makes the namespace shared for good, for both: blocks
        the first rendered alone are rendered again by the second where it shares them
        (once: from then on they are in the cache)."""
        owner = self._owners.get(namespace)
        if owner is None:
            self._owners[namespace] = stream
            return True
        if owner is stream:
            return stream.alone
        if owner is not _SHARED:
            owner.alone = False
            self._owners[namespace] = _SHARED
        return False

    # -- prompts -----------------------------------------------------------------------------
    def _part(self, turn: Turn, namespace: str, tail_key: object, i: int,
              whole: int, rest: int) -> list[int]:
        """Pool indices of the prompt's part `i`: a whole block, then the partial block or the
        tail."""
        bs = turn.block_tokens
        if i < whole:
            return self.vocab.draw(_seed(namespace, turn.hash_ids[i], bs), bs)
        if whole < len(turn.hash_ids):
            return self.vocab.draw(_seed(namespace, turn.hash_ids[whole], bs), rest)
        return self.vocab.draw(_seed(namespace, "tail", tail_key), rest)

    def _head(self, turn: Turn, namespace: str, tail_key: object, whole: int,
              rest: int) -> tuple[list[int], int]:
        """The run marker replaces the first tokens (so the count stays exact): the indices of
        the leading parts that hold it, marked, and how many parts they are (one but for
        blocks smaller than the marker)."""
        m = min(MARKER_TOKENS, turn.input_tokens)
        head: list[int] = []
        k = 0
        while len(head) < m:
            head.extend(self._part(turn, namespace, tail_key, k, whole, rest))
            k += 1
        head[:m] = self.marker[:m]
        return head, k

    def json(self, turn: Turn, namespace: str, tail_key: object,
             stream: PromptStream | None = None, chat: ChatLayout | None = None,
             pos: int = 0, bust: str | None = None) -> PromptJson:
        """The prompt as JSON pieces; `stream` (the turn's stream) keeps its whole blocks for
        the next turn. With `chat` (the stream's message layout; `pos` the turn's place in
        it) the pieces are a chat message list, the same content cut into its messages;
        `bust` (its tree's `tree_marker`) then opens the first user message in place of the
        run marker."""
        stream = stream if stream is not None else PromptStream()
        self.sync(stream, turn, namespace)
        if chat is not None:
            return self._messages(turn, namespace, tail_key, stream, chat, pos, bust)
        whole, rest = self._layout(turn)
        head, k = self._head(turn, namespace, tail_key, whole, rest)
        pieces = [self._open, self._render(head)[len(self._sep):]]
        if k < whole:
            pieces += stream.span(k, whole)
        if k <= whole and rest:
            pieces.append(self._render(self._part(turn, namespace, tail_key, whole, whole,
                                                  rest)))
        pieces.append(self._close)
        return PromptJson(tuple(pieces), turn.input_tokens)

    def _messages(self, turn: Turn, namespace: str, tail_key: object, stream: PromptStream,
                  chat: ChatLayout, pos: int, bust: str | None) -> PromptJson:
        """The turn's messages: each segment's blocks (the stream's rendered ones), then its
        tail: the turn's own (as the one-message prompt ends) on the trailing segment, an
        earlier turn's left in the history drawn from that turn's place in the stream, so it
        reads the same in every later request. The run marker replaces the first tokens, or,
        with `bust`, that text opens the first user message of the list as the harness's
        marker does (aiperf/workers/worker.py:343-409 `_apply_cache_bust`: every request,
        into the first user message of the messages sent, after a system message; none when
        there is no user message)."""
        if self.token_ids:
            raise WorkloadError("chat messages carry text, not token ids",
                                hint="use --endpoint chat")
        whole, rest = self._layout(turn)
        bs = turn.block_tokens
        pieces = [b"["]
        marker = [] if bust is not None else list(self.marker[:min(MARKER_TOKENS,
                                                                   turn.input_tokens)])
        total = 0
        busted: tuple[str, int, int] | None = None
        segments = chat.at(pos)
        opened = marker_segment(segments) if bust is not None else None
        for i, seg in enumerate(segments):
            pieces.append(_OPEN[seg.role] if i == 0 else b"," + _OPEN[seg.role])
            if i == opened:
                busted = (bust, seg.first, self.vocab.count(bust))
                pieces.append(orjson.dumps(bust)[1:-1])
                total += busted[2]
            b, stop = seg.first, seg.first + seg.blocks
            while marker and b < stop:
                idx = self.vocab.draw(_seed(namespace, turn.hash_ids[b], bs), bs)
                pieces.append(self._render(self._mark(idx, marker)))
                b += 1
            pieces += stream.span(b, stop)
            if seg.tail_tokens:
                if seg.tail_of == pos:
                    idx = self._part(turn, namespace, tail_key, whole, whole, rest)
                else:
                    idx = self.vocab.draw(_seed(namespace, "tail", chat.key, seg.tail_of),
                                          seg.tail_tokens)
                pieces.append(self._render(self._mark(idx, marker)))
            pieces.append(b'"}')
            total += seg.tokens(bs)
        pieces.append(b"]")
        if busted is None:
            return PromptJson(tuple(pieces), total, messages=True)
        return PromptJson(tuple(pieces), total, messages=True, marker=busted[0],
                          marker_at_block=busted[1], marker_tokens=busted[2])

    @staticmethod
    def _mark(idx: list[int], marker: list[int]) -> list[int]:
        """`idx` with its first tokens the marker's still to be placed (taken from it)."""
        n = min(len(idx), len(marker))
        if n:
            idx[:n] = marker[:n]
            del marker[:n]
        return idx

    def indices(self, turn: Turn, namespace: str, tail_key: object) -> list[int]:
        """Pool indices of the whole prompt (for tests and tools)."""
        whole, rest = self._layout(turn)
        head, k = self._head(turn, namespace, tail_key, whole, rest)
        for i in range(k, whole + (rest > 0)):
            head += self._part(turn, namespace, tail_key, i, whole, rest)
        return head

    def build(self, turn: Turn, namespace: str, tail_key: object) -> Prompt:
        """The prompt whole: its text, or its token ids."""
        value = orjson.loads(b"".join(self.json(turn, namespace, tail_key).pieces))
        if self.token_ids:
            return Prompt(None, value, turn.input_tokens)
        return Prompt(value, None, turn.input_tokens)
