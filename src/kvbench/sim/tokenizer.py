"""The engine host's tokenizer: one thread in front of the scheduler.

vLLM 0.26 tokenizes each prompt in its API server's renderer pool before the engine core sees
the request, and that pool has one worker (`renderer_num_workers` 1, vllm/config/model.py;
`renderers/base.py` runs `_tokenize_prompt` on it). So a prompt reaches the scheduler its
tokenization time after it arrives, and prompts arriving together wait for each other in
arrival order instead of overtaking (a long prompt first delays a short one behind it)."""

from __future__ import annotations


class TokenizerThread:
    """Busy intervals of the one thread, earliest arrivals served first."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy: list[tuple[float, float]] = []

    def done_s(self, arrival_s: float, work_s: float, now_s: float) -> float:
        """When a prompt arriving at `arrival_s` with `work_s` of tokenization is done: in
        the first gap that long at or after its arrival. Prompts are submitted in the order
        their senders get to them, not by arrival time, so a later-submitted prompt that
        arrives first takes an earlier gap."""
        if work_s <= 0:
            return arrival_s
        self.busy = [b for b in self.busy if b[1] > now_s]
        start = arrival_s
        for b0, b1 in sorted(self.busy):
            if start + work_s <= b0:
                break
            start = max(start, b1)
        self.busy.append((start, start + work_s))
        return start + work_s
