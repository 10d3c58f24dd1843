"""One request inside the simulator: what it asks for, where it is, and what happened to it."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbench.sim.cache import Admission

# sink(request, event, new_tokens, now_s); events: "first", "tokens", "finish", "error"
Sink = Callable[["SimRequest", str, int, float], None]


@dataclass(slots=True, eq=False)
class SimRequest:
    """`keys` name the request's pages in order (the last may be partial); tokens past the
    last key are an unpaged tail that is never cached."""

    rid: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    keys: list[Hashable]
    page_tokens: int
    session: int = 0
    sink: Sink | None = None
    # KV of this many prompt tokens arrived computed (a decode rank after disaggregated
    # prefill): only the rest is prefilled, and none of it counts as a cache hit
    prefilled_tokens: int = 0
    # filled in by the engine
    admission: Admission | None = None
    prefill_left: int = 0
    context_tokens: int = 0
    decode_join_step: int = 0
    decode_steps: int = 0
    blocks: Any = None  # vLLM block-table state (sim/vllm.py)
    finish_seq: int = 0  # the decode-finish heap entry that is current (preemption)
    emitted: int = 0
    blocked_need: int = 0
    admit_s: float = -1.0
    first_s: float = -1.0
    finish_s: float = -1.0
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    error: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def paged_tokens(self) -> int:
        return min(self.input_tokens, len(self.keys) * self.page_tokens)

    @property
    def cached_tokens(self) -> int:
        return self.device_hit_tokens + self.host_hit_tokens

    @property
    def ttft_s(self) -> float:
        return self.first_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s
