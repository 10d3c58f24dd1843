"""The engine host's tokenizer: one thread in front of the scheduler.

vLLM 0.26 tokenizes each prompt in its API server's renderer pool before the engine core sees
the request, and that pool has one worker (`renderer_num_workers` 1, vllm/config/model.py;
`renderers/base.py` runs `_tokenize_prompt` on it). A one-worker ThreadPoolExecutor runs its
work queue first in, first out: a prompt reaches the scheduler its tokenization time after
the thread is free of every prompt that arrived before it, and prompts arriving together wait
for each other in arrival order instead of overtaking (a long prompt first delays a short one
behind it)."""

from __future__ import annotations


class TokenizerThread:
    """The thread's queue, fed in arrival order (sim/arrivals.py keeps that order): only
    when it is next free matters."""

    __slots__ = ("free_s",)

    def __init__(self) -> None:
        self.free_s = 0.0

    def start_s(self, arrival_s: float) -> float:
        """When a prompt arriving at `arrival_s`, behind every earlier one, starts."""
        return arrival_s if arrival_s > self.free_s else self.free_s

    def done_s(self, arrival_s: float, work_s: float) -> float:
        """Take the next prompt (none that arrived earlier is still to come): when it is
        done."""
        if work_s <= 0:
            return arrival_s
        self.free_s = self.start_s(arrival_s) + work_s
        return self.free_s
