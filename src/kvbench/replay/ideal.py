"""The ideal-cache ceiling: how many prompt tokens an unlimited prefix cache would have served
for exactly the requests this run sent, in the order it sent them.

A prompt's content is a function of (namespace, hash id, block size) (workload/prompt.py), so
two prompts share a prefix exactly where their leading hash ids agree. The ceiling walks the
leading blocks of each prompt through the chain of blocks seen before in this run; a block
seen only partially (the last, partial block of an earlier turn, whose content is a prefix of
the full block) counts for the tokens seen and ends the match. Tokens after the hashed blocks
are unique per turn and never hit. The achieved hit rate of a real cache is at most this
(it has finite tiers and may not yet hold a concurrent request's pages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbench.workload.blocks import common_prefix
from kvbench.workload.session import Turn


@dataclass(slots=True)
class IdealWalk:
    """Where a stream's last walk ended its whole blocks: `whole` leading blocks of `ids` (in
    `namespace`, of `block_tokens`), chain hash `chain` after them. Its next turn starts there
    when it repeats them: every one of them was seen whole, so each hits in full and the walk
    over them changes nothing (a 100K-token turn walks the blocks it adds, not 1,500)."""

    ids: Sequence[int] = ()
    namespace: str = ""
    block_tokens: int = 0
    whole: int = 0
    chain: int = 0


class IdealCache:
    """Prefix chains seen so far (a 64-bit hash of the chain of ids: a 100K-token prompt
    costs a walk, not a rehash of its whole prefix per block), each with the most tokens of its
    last block seen."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def observe(self, turn: Turn, namespace: str, walk: IdealWalk | None = None) -> int:
        """Tokens of `turn` an unlimited cache holds from earlier requests; then remember
        its blocks. At least one token is always computed, as in every engine. `walk` is the
        turn's stream's, to start where its last turn left off."""
        bs, left = turn.block_tokens, turn.input_tokens
        ids = turn.hash_ids
        chain = hash((namespace, bs))
        skip = 0
        if (walk is not None and walk.whole and walk.namespace == namespace
                and walk.block_tokens == bs and walk.whole * bs <= left
                and common_prefix(walk.ids, ids) >= walk.whole):
            skip, chain = walk.whole, walk.chain
        hit, matching, left = skip * bs, True, left - skip * bs
        whole, whole_chain = skip, chain
        for h in ids[skip:] if skip else ids:
            if left <= 0:
                break
            n = min(bs, left)
            chain = hash((chain, h))
            seen = self._seen.get(chain, 0)
            if matching:
                hit += min(seen, n)
                matching = seen >= n
            if n > seen:
                self._seen[chain] = n
            left -= n
            if n == bs:
                whole, whole_chain = whole + 1, chain
        if walk is not None:
            walk.ids, walk.namespace, walk.block_tokens = ids, namespace, bs
            walk.whole, walk.chain = whole, whole_chain
        return min(hit, max(0, turn.input_tokens - 1))
