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

from kvbench.workload.session import Turn


class IdealCache:
    """Prefix chains seen so far (a 64-bit hash of the chain of ids: a 100K-token prompt
    costs a walk, not a rehash of its whole prefix per block), each with the most tokens of its
    last block seen."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def observe(self, turn: Turn, namespace: str) -> int:
        """Tokens of `turn` an unlimited cache holds from earlier requests; then remember
        its blocks. At least one token is always computed, as in every engine."""
        bs, left = turn.block_tokens, turn.input_tokens
        chain = hash((namespace, bs))
        hit, matching = 0, True
        for h in turn.hash_ids:
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
        return min(hit, max(0, turn.input_tokens - 1))
