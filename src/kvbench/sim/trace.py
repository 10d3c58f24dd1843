"""The simulator's view of a trace, read by the workload's loader (the one that `replay` uses,
with the same validation and errors: `kvbench.workload.loader.read_trace_file`).

- kv-cache-tester / weka sessions: one simulator session per session, subagent requests
  inline in order; `t` is the arrival offset, `think_time` the closed-loop gap.
- Mooncake JSONL rows (512-token blocks): each row is its own session arriving at its
  timestamp (open loop), as the trace was recorded.

Hash ids are scoped per file (a `global` scope shares them across files), so keys are
namespaced by file index."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from kvbench.redaction import redacted_id
from kvbench.workload.loader import read_trace_file, trace_files
from kvbench.workload.mooncake import BLOCK_TOKENS as MOONCAKE_BLOCK_TOKENS
from kvbench.workload.session import Turn

_NAMESPACE = 1 << 40


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_s: float  # open-loop send time
    think_s: float  # closed-loop gap after the session's previous request finished
    input_tokens: int
    output_tokens: int
    keys: list[int]
    page_tokens: int


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    page_tokens: int
    sessions: list[list[TraceRequest]]

    @property
    def num_requests(self) -> int:
        return sum(len(s) for s in self.sessions)


def _request(turn: Turn, arrival_s: float, think_s: float, offset: int) -> TraceRequest:
    ids = turn.hash_ids[: math.ceil(turn.input_tokens / turn.block_tokens)]  # past the input
    return TraceRequest(arrival_s, think_s, turn.input_tokens, turn.output_tokens,
                        [offset + h for h in ids], turn.block_tokens)


def load_trace(path: Path, index: int = 0) -> Trace:
    """One validated trace file; `index` namespaces its local hash ids."""
    trace = read_trace_file(Path(path))
    name = redacted_id(trace.path.name.split(".")[0])
    offset = index * _NAMESPACE
    sessions: list[list[TraceRequest]] = []
    page = MOONCAKE_BLOCK_TOKENS
    for session in trace.sessions:
        base = 0 if session.namespace == "global" else offset
        page = session.meta.get("block_size", page)
        sessions.append([_request(t, t.t_s, t.think_time_s, base) for t in session.turns])
    for t_s, turn, _where in trace.rows:
        sessions.append([_request(turn, t_s, 0.0, offset)])
    only = trace.sessions[0] if len(trace.sessions) == 1 and not trace.rows else None
    if only is not None and only.session_id != only.source:  # the file's own `id`
        name = only.session_id
    return Trace(name, page, sessions)


def load_traces(paths: list[Path]) -> list[Trace]:
    return [load_trace(p, i) for i, p in enumerate(trace_files(paths))]
