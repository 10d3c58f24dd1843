"""State checkpoints of a hybrid (linear-attention + attention) model: where SGLang keeps a
copy of the recurrent (GDN/Mamba) state, and so where a prefix hit may end.

A hybrid model resumes a prefix only from a state saved at its end, so SGLang's mamba radix
cache (sglang 0.5.17 mem_cache/mamba_radix_cache.py `_match_prefix_helper`, :1068-1108) ends a
match at the deepest matched node that holds a state, however far the KV pages match. With
the `extra_buffer` strategy (the default with a radix cache) a request's state is saved at the
end of each prefill chunk of at least one checkpoint unit, aligned down to the unit from where
the chunk started (managers/schedule_batch.py `_mamba_radix_cache_v2_req_prepare_for_extend`,
:2553-2633; inserted by `cache_unfinished_req` :666 / `cache_finished_req` :541); the unit is
`mamba_cache_chunk_size`, max(the FLA kernel's chunk of 64, the page) (server_args.py
:8668-8681). Where a match's KV reaches past its last state, the branching point (the KV
match aligned down to the unit) is saved instead of the end of the chunk it falls in
(`_match_post_processor` :1151-1158, schedule_batch.py :2618-2631), so the next request of
the session can resume there.

Kept per page key: a state at token position p is the one after the page whose key is
`keys[p / page - 1]`. Not modelled: the states saved every `mamba_track_interval` (256) tokens
of decode (they follow generated tokens, which the next turn's prompt does not repeat) and the
eviction of states from the Mamba pool while their pages stay (its LRU, `evict_mamba`)."""

from __future__ import annotations

from collections.abc import Hashable

from kvbench.sim.request import SimRequest


class StateCheckpoints:
    def __init__(self, unit_tokens: int) -> None:
        self.unit_tokens = unit_tokens  # the checkpoint unit before the page (64 for GDN)
        self._keys: set[Hashable] = set()
        self._branch: dict[int, int] = {}  # rid -> branching point to save during its prefill

    def _unit(self, req: SimRequest) -> int:
        return max(self.unit_tokens, req.page_tokens)

    def resumable(self, req: SimRequest, cached_tokens: int) -> int:
        """The longest prefix of `req`, at most `cached_tokens`, that ends at a saved state;
        notes the branching point its prefill saves when the KV reaches past that."""
        page = req.page_tokens
        pages = min(cached_tokens // page, len(req.keys))
        p = pages
        while p and req.keys[p - 1] not in self._keys:
            p -= 1
        resumed = p * page
        unit = self._unit(req)
        branch = cached_tokens // unit * unit
        if branch > resumed and branch % page == 0:
            self._branch[req.rid] = branch
        return resumed

    def computed(self, req: SimRequest, start: int, n: int) -> None:
        """`req` computed prompt tokens [start, start + n): the state it saves."""
        unit, page = self._unit(req), req.page_tokens
        end, saved = start + n, 0
        if n >= unit:  # a shorter chunk saves nothing (the track mask)
            saved = start + n // unit * unit
            branch = self._branch.get(req.rid)
            if branch is not None and start < branch < end and (branch - start) % unit == 0:
                saved = branch
        if end >= req.input_tokens:  # its prefill is done
            self._branch.pop(req.rid, None)
        if saved > start and saved % page == 0 and saved // page <= len(req.keys):
            self._keys.add(req.keys[saved // page - 1])
