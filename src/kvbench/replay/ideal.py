"""The ideal-cache ceiling: how many prompt tokens an unlimited prefix cache would have served
for exactly the requests this run sent, in the order it sent them.

A prompt's content is a function of (namespace, hash id, block size) (workload/prompt.py), so
two prompts share a prefix exactly where their leading hash ids agree. The ceiling matches
the leading blocks of each prompt against the blocks seen before in this run; a block seen
only partially (the last, partial block of an earlier turn, whose content is a prefix of the
full block) counts for the tokens seen and ends the match. Tokens after the hashed blocks
are unique per turn and never hit. The achieved hit rate of a real cache is at most this
(it has finite tiers and may not yet hold a concurrent request's pages).

What was seen is a radix tree of hash ids per (namespace, block size), as SGLang's radix
cache holds token pages: each edge a run of blocks seen whole but perhaps its last. A turn
walks a few edges (the shared prefix, its stream's context) and compares them as
sequences, so neither its cost nor the tree's size grows with the blocks of a context: a
1M-token turn of 15,600 blocks walks and stores a handful of edges, not 15,600 entries."""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.workload.blocks import common_prefix
from kvbench.workload.session import Turn


class _Edge:
    """Blocks `ids` seen whole but the last, of which `last` tokens were seen; the edges
    below it by their first id."""

    __slots__ = ("below", "ids", "last")

    def __init__(self, ids: Sequence[int], last: int, below: dict[int, _Edge] | None = None
                 ) -> None:
        self.ids = ids
        self.last = last
        self.below = below if below is not None else {}


class IdealCache:
    __slots__ = ("_roots",)

    def __init__(self) -> None:
        self._roots: dict[tuple, _Edge] = {}

    def observe(self, turn: Turn, namespace: str, marker: str | None = None, at: int = 0,
                marker_tokens: int = 0) -> int:
        """Tokens of `turn` an unlimited cache holds from earlier requests; then remember
        its blocks. At least one token is always computed, as in every engine. `marker`
        (a tree's cache-bust marker, workload/prompt.py `tree_marker`) sits after the first
        `at` blocks and adds `marker_tokens`: what follows it is shared only with prompts
        that had the same blocks and the same marker before it."""
        bs, n = turn.block_tokens, turn.input_tokens
        if marker is None:
            return min(self._walk((namespace, bs), turn.hash_ids, n, bs), max(0, n - 1))
        ids = turn.hash_ids
        at = min(at, len(ids), n // bs)
        head = self._walk((namespace, bs), ids[:at], at * bs, bs)
        key = (namespace, bs, marker, tuple(ids[:at]))
        seen = key in self._roots  # this marker followed these blocks before
        rest = self._walk(key, ids[at:], n - at * bs, bs)
        hit = head + marker_tokens + rest if seen and head == at * bs else head
        return min(hit, max(0, n + marker_tokens - 1))

    def _walk(self, key: tuple, hash_ids, n: int, bs: int) -> int:
        """The tokens of a prompt of `n` tokens over `hash_ids` seen under `key` before;
        then remember them."""
        k = min(len(hash_ids), -(-n // bs))  # the blocks the prompt reaches into
        if k <= 0:
            self._roots.setdefault(key, _Edge((), bs))
            return 0
        ids = hash_ids[:k]
        tail = min(bs, n - (k - 1) * bs)  # tokens of the prompt in its last block
        root = self._roots.get(key)
        if root is None:
            root = self._roots[key] = _Edge((), bs)
        edge, pos, hit = root, 0, 0
        while True:
            nxt = edge.below.get(ids[pos])
            if nxt is None:  # the rest was never seen
                edge.below[ids[pos]] = _Edge(ids[pos:], tail)
                break
            label = nxt.ids
            c = common_prefix(label, ids[pos:])
            ends = pos + c == k  # the prompt's last block is among the matched
            if c < len(label):  # matched blocks seen whole (the edge's last is further on)
                hit += c * bs - (bs - tail if ends else 0)
                if not ends:  # the prompt leaves the edge: split it there
                    rest = _Edge(label[c:], nxt.last, nxt.below)
                    nxt.ids, nxt.last = label[:c], bs
                    nxt.below = {label[c]: rest, ids[pos + c]: _Edge(ids[pos + c:], tail)}
                break
            want = tail if ends else bs  # the prompt's tokens in the edge's last block
            hit += (c - 1) * bs + min(nxt.last, want)
            nxt.last = max(nxt.last, want)
            if ends:
                break
            if not nxt.below:  # a stream's context grown (nothing went past a partly seen
                nxt.ids, nxt.last = ids[pos:], tail  # block): the edge grows with it
                break
            edge, pos = nxt, pos + c  # an edge with edges below was seen whole
        return hit
