"""The workload's data: a session is an ordered list of turns, each a request with its context
named by hash blocks. Every trace format and the synthetic generator produce these."""

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
    think_time_s: float = 0.0  # idle gap after the previous turn ended (tool / user time)
    api_time_s: float | None = None  # the recorded server time, for reference only
    t_s: float = 0.0  # offset from the session start in the trace
    agent: str | None = None  # subagent id when the turn belongs to a subagent


@dataclass(slots=True)
class Session:
    session_id: str
    turns: list[Turn]
    namespace: str  # scope of hash ids: ids are equal content only within one namespace
    source: str = ""  # "file:line" or "synthetic"
    meta: dict = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)
