"""Requests on their way to the scheduler: each becomes visible when the host's tokenizer
thread is done with its prompt (sim/tokenizer.py), earliest first, ties in submit order."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from kvbench.sim.request import SimRequest
from kvbench.sim.tokenizer import TokenizerThread


class Arrivals:
    __slots__ = ("_heap", "_seq", "tokenizer")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, SimRequest]] = []
        self._seq = 0
        self.tokenizer = TokenizerThread()

    def push(self, req: SimRequest, tokenize_s: float, now_s: float) -> float:
        """Queue `req` (its arrival_s set); returns when the scheduler sees it."""
        seen_s = self.tokenizer.done_s(req.arrival_s, tokenize_s, now_s)
        self._seq += 1
        heapq.heappush(self._heap, (seen_s, self._seq, req))
        return seen_s

    def next_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_s: float) -> Iterator[SimRequest]:
        heap = self._heap
        while heap and heap[0][0] <= now_s:
            yield heapq.heappop(heap)[2]

    def remove(self, req: SimRequest) -> bool:
        """Withdraw `req` if it is still on its way; whether it was."""
        if not any(r is req for _, _, r in self._heap):
            return False
        self._heap = [a for a in self._heap if a[2] is not req]
        heapq.heapify(self._heap)
        return True

    def take(self, reqs: set[int]) -> list[SimRequest]:
        """Withdraw the requests (by id) still on their way; those withdrawn."""
        out = [a[2] for a in self._heap if id(a[2]) in reqs]
        if out:
            self._heap = [a for a in self._heap if id(a[2]) not in reqs]
            heapq.heapify(self._heap)
        return out

    def __len__(self) -> int:
        return len(self._heap)
