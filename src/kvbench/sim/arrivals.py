"""Requests on their way to the scheduler: each becomes visible when the host's tokenizer
thread is done with its prompt (sim/tokenizer.py), earliest first, ties in submit order.

Requests are submitted when their senders get to them, not in arrival order (a lane submits a
new session's first turn when the previous one ends, after other lanes have submitted turns
that arrive later; an open-loop trace submits everything at once). A request is handed to
the thread only once nothing can arrive before it any more (the thread would start it by
now), so the thread takes prompts in arrival order, as vLLM's one-worker pool does."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from kvbench.sim.request import SimRequest
from kvbench.sim.tokenizer import TokenizerThread


class Arrivals:
    __slots__ = ("_heap", "_pending", "_seq", "size", "tokenizer")

    def __init__(self) -> None:
        # tokenized or being tokenized: (seen_s, seq, request)
        self._heap: list[tuple[float, int, SimRequest]] = []
        # not yet handed to the thread: (arrival_s, seq, request, tokenize_s)
        self._pending: list[tuple[float, int, SimRequest, float]] = []
        self._seq = 0
        self.tokenizer = TokenizerThread()
        # requests on their way (both lists): read once per request per rank by routers
        self.size = 0

    def push(self, req: SimRequest, tokenize_s: float, now_s: float) -> float:
        """Queue `req` (its arrival_s set, not before `now_s`); returns the earliest the
        scheduler can see it (later when prompts arriving before it are still to come)."""
        self._seq += 1
        self.size += 1
        heapq.heappush(self._pending, (req.arrival_s, self._seq, req, tokenize_s))
        self._hand_over(now_s)
        return self.tokenizer.start_s(req.arrival_s) + tokenize_s

    def _hand_over(self, now_s: float) -> None:
        """Give the thread, in arrival order, every prompt it would have started by now
        (later submissions arrive at or after now: none can come before these)."""
        pending, thread = self._pending, self.tokenizer
        while pending and thread.start_s(pending[0][0]) <= now_s:
            arrival_s, seq, req, work_s = heapq.heappop(pending)
            heapq.heappush(self._heap, (thread.done_s(arrival_s, work_s), seq, req))

    def next_s(self) -> float | None:
        if self._heap:  # handed over before any pending one: seen first
            return self._heap[0][0]
        if self._pending:
            arrival_s, _, _, work_s = self._pending[0]
            return self.tokenizer.start_s(arrival_s) + work_s
        return None

    def pop_due(self, now_s: float) -> Iterator[SimRequest]:
        self._hand_over(now_s)
        heap = self._heap
        while heap and heap[0][0] <= now_s:
            self.size -= 1
            yield heapq.heappop(heap)[2]

    def remove(self, req: SimRequest) -> bool:
        """Withdraw `req` if it is still on its way; whether it was (a prompt being tokenized
        keeps the thread busy)."""
        for name in ("_heap", "_pending"):
            entries = getattr(self, name)
            if any(e[2] is req for e in entries):
                setattr(self, name, [e for e in entries if e[2] is not req])
                heapq.heapify(getattr(self, name))
                self.size -= 1
                return True
        return False

    def take(self, reqs: set[int]) -> list[SimRequest]:
        """Withdraw the requests (by id) still on their way; those withdrawn (one handed to
        the thread already keeps it busy)."""
        out = []
        for name in ("_heap", "_pending"):
            entries = getattr(self, name)
            got = [e[2] for e in entries if id(e[2]) in reqs]
            if got:
                out += got
                self.size -= len(got)
                setattr(self, name, [e for e in entries if id(e[2]) not in reqs])
                heapq.heapify(getattr(self, name))
        return out

    def __len__(self) -> int:
        return self.size
