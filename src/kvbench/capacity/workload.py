"""One workload, two executors: the sessions a replay sends, as the traces the simulator runs.

The replay client (replay/lanes.py) sends each turn's prompt built from its hash blocks, its
output length (capped), and waits `min(think x scale, cap)` after the previous turn ended;
the simulator's closed loop waits `TraceRequest.think_s`. Converting the same `Session`s with
the same bounds makes a prediction and a measurement of the same requests."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.sim.trace import Trace, TraceRequest
from kvbench.workload.session import Session

# Keys of different namespaces must never collide (sim/trace.py namespaces files the same way).
_NAMESPACE_STRIDE = 1 << 40


@dataclass(frozen=True, slots=True)
class WorkloadBounds:
    """The replay options that change what is sent (ReplayConfig's names, without `_cfg`)."""

    think_time_scale: float = 1.0
    think_time_cap_s: float = 60.0
    max_tokens_cap: int | None = None
    max_input_tokens: int | None = None


def sessions_to_traces(sessions: list[Session], bounds: WorkloadBounds) -> list[Trace]:
    """One Trace per session (the simulator's closed loop hands sessions to lanes in this
    order, as the replay's session pool does)."""
    spaces: dict[str, int] = {}
    traces = []
    for s in sessions:
        offset = spaces.setdefault(s.namespace, len(spaces)) * _NAMESPACE_STRIDE
        reqs = []
        for turn in s.turns:
            if bounds.max_input_tokens is not None and turn.input_tokens > bounds.max_input_tokens:
                continue  # the replay skips these turns too
            out = turn.output_tokens
            if bounds.max_tokens_cap is not None:
                out = min(out, bounds.max_tokens_cap)
            think = min(turn.think_time_s * bounds.think_time_scale, bounds.think_time_cap_s)
            reqs.append(TraceRequest(
                arrival_s=turn.t_s, think_s=think, input_tokens=turn.input_tokens,
                output_tokens=max(1, out), keys=[offset + h for h in turn.hash_ids],
                page_tokens=turn.block_tokens))
        if reqs:
            traces.append(Trace(s.session_id, reqs[0].page_tokens, [reqs]))
    return traces
