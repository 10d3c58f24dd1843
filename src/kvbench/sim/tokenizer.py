"""The engine host's tokenizer: one thread in front of the scheduler.

vLLM 0.26 tokenizes each prompt in its API server's renderer pool before the engine core sees
the request, and that pool has one worker (`renderer_num_workers` 1, vllm/config/model.py;
`renderers/base.py` runs `_tokenize_prompt` on it). So a prompt reaches the scheduler its
tokenization time after it arrives, and prompts arriving together wait for each other in
arrival order instead of overtaking (a long prompt first delays a short one behind it)."""

from __future__ import annotations

from bisect import bisect_right


class TokenizerThread:
    """Busy intervals of the one thread (disjoint, sorted; ends therefore sorted too).
    Back-to-back intervals are kept as one (no prompt fits in a gap of zero), so a queue of
    prompts is one interval, not one per prompt to walk past."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def done_s(self, arrival_s: float, work_s: float, now_s: float) -> float:
        """When a prompt arriving at `arrival_s` with `work_s` of tokenization is done: in
        the first gap that long at or after its arrival. Prompts are submitted in the order
        their senders get to them, not by arrival time (an open-loop trace submits them all
        at once), so a later-submitted prompt that arrives first takes an earlier gap."""
        if work_s <= 0:
            return arrival_s
        starts, ends = self.starts, self.ends
        done = bisect_right(ends, now_s)  # intervals over by now never matter again
        if done:
            del starts[:done], ends[:done]
        i, start = bisect_right(ends, arrival_s), arrival_s
        n = len(starts)
        while i < n and start + work_s > starts[i]:
            if ends[i] > start:
                start = ends[i]
            i += 1
        end = start + work_s
        after = i < n and starts[i] == end
        if i and ends[i - 1] == start:  # it extends the interval before it
            if after:
                ends[i - 1] = ends[i]
                del starts[i], ends[i]
            else:
                ends[i - 1] = end
        elif after:
            starts[i] = start
        else:
            starts.insert(i, start)
            ends.insert(i, end)
        return end
