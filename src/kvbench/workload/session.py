"""The workload's data: a session is an ordered list of turns, each a request with its context
named by hash blocks. Every trace format and the synthetic generator produce these.

A session is a tree of request streams: its root (the turns no branch claims) and its
subagents (`Branch`es), each a run of `turns` spawned when a root turn ends and, unless it
runs in the background, waited for by a later root turn (SPAWN/JOIN, as agentx-harness
1.0.12 replays the weka corpus: `aiperf/dataset/loader/weka_trace.py` `_reconstruct_serial`).
The turns stay in trace order in one list, so a reader that ignores branches replays the
subagents inline, in the parent's lane."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a session.

    `hash_ids` name the prompt's leading blocks of `block_tokens` tokens each; equal ids in one
    `Session.namespace` mean equal content. `input_tokens` may exceed the blocks (an unhashed tail,
    kv-cache-tester) or end inside the last block (a partial block, Mooncake)."""

    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    block_tokens: int
    think_time_s: float = 0.0  # idle gap after the previous turn of its stream ended
    api_time_s: float | None = None  # the recorded server time, for reference only
    t_s: float = 0.0  # offset from the session start in the trace (the root's clock)
    agent: str | None = None  # subagent id when the turn belongs to a subagent
    # the output recorded when it was 0 (`output_tokens` asks for 1): the harness sizes the
    # reply in the next prompt's history from the recorded count (workload/messages.py)
    recorded_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Branch:
    """A subagent: `Session.turns[first:first + count]`, spawned when root turn `spawn` ends,
    its first request `delay_s` later (its recorded offset from the spawn); root turn `join`
    waits for it to end (None: a background subagent, nothing waits for it). Indexes are into
    `Session.turns`."""

    agent: str
    first: int
    count: int
    spawn: int
    join: int | None = None
    delay_s: float = 0.0

    @property
    def end(self) -> int:
        return self.first + self.count


@dataclass(slots=True)
class Session:
    session_id: str
    turns: list[Turn]
    namespace: str  # scope of hash ids: ids are equal content only within one namespace
    source: str = ""  # "file:line" or "synthetic"
    meta: dict = field(default_factory=dict)
    # the subagents; None: derived from the turns' `agent` (`tree()`)
    branches: tuple[Branch, ...] | None = None
    # turn -> the turns of other streams that must have ended before it is sent (the
    # recorded happens-before between streams of one agent: `workload/weka.py`)
    after: dict[int, tuple[int, ...]] | None = None

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def tree(self) -> tuple[Branch, ...]:
        """The subagents: `branches`, or, where a producer gave none, one per run of turns of
        one agent, spawned by the root turn before it and joined by the root turn after it
        (background when none follows); a run before any root turn has no parent to spawn it
        and is left out, as the harness drops it (weka_trace.py `_reconstruct_serial`)."""
        if self.branches is not None:
            return self.branches
        out: list[Branch] = []
        k, n = 0, len(self.turns)
        last_root: int | None = None
        while k < n:
            agent = self.turns[k].agent
            if agent is None:
                last_root = k
                k += 1
                continue
            end = k
            while end < n and self.turns[end].agent == agent:
                end += 1
            join = next((j for j in range(end, n) if self.turns[j].agent is None), None)
            if last_root is not None:
                out.append(Branch(agent, k, end - k, last_root, join))
            k = end
        return tuple(out)

    def truncated(self, max_turns: int) -> Session:
        """The session's first `max_turns` turns, with the branches that lie within them (a
        join past the cut becomes background)."""
        kept = tuple(
            Branch(b.agent, b.first, b.count, b.spawn,
                   b.join if b.join is not None and b.join < max_turns else None, b.delay_s)
            for b in self.tree() if b.end <= max_turns)
        after = None if self.after is None else {
            k: tuple(p for p in ps if p < max_turns)
            for k, ps in self.after.items() if k < max_turns}
        return Session(self.session_id, self.turns[:max_turns], self.namespace, self.source,
                       dict(self.meta), kept, after)

    def peak_context_tokens(self) -> int:
        """The largest prompt plus requested output of any turn: what a server's context must
        hold for the whole session to be served (agentx-harness weka_trace.py
        `_trace_peak_context_length`: a recorded output of 0 asks for 1)."""
        return max((t.input_tokens + max(1, t.output_tokens) for t in self.turns), default=0)
