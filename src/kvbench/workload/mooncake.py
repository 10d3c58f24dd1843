"""Mooncake FAST'25 traces: JSONL rows `{timestamp (ms), input_length, output_length, hash_ids}`
with 512-token blocks and global hash ids. Rows carry no session id; a row whose blocks extend
an earlier row's blocks is taken as that conversation's next turn (the chain the multi-turn
rows form), and the timestamp gap minus nothing is its think time (the trace has no durations).
Other rows start sessions of their own."""

from __future__ import annotations

import math
from typing import Any

from kvbench import bounds
from kvbench.errors import WorkloadError, shown
from kvbench.workload.session import Session, Turn

BLOCK_TOKENS = 512
MS_PER_S = 1000.0


def parse_row(obj: Any, where: str) -> tuple[float, Turn]:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: a Mooncake row must be a JSON object, got {shown(obj)}")
    values = {}
    for key in ("timestamp", "input_length", "output_length"):
        v = obj.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise WorkloadError(f"{where}: field {key} = {shown(v)} must be a finite number >= 0")
        values[key] = v
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
        raise WorkloadError(f"{where}: field hash_ids = {shown(ids)} must be a list of integers")
    n_in = int(values["input_length"])
    if n_in < 1:
        raise WorkloadError(f"{where}: field input_length = {n_in} must be >= 1")
    # each within its physical range (kvbench/bounds.py): an input_length of 10^13 or
    # timestamps 1e300 apart were simulated as if real
    bounds.CONTEXT_TOKENS.check(values["input_length"], f"{where}: field input_length",
                                WorkloadError)
    bounds.OUTPUT_TOKENS.check(max(1, values["output_length"]), f"{where}: field "
                               "output_length", WorkloadError)
    bounds.TRACE_TIME_S.check(values["timestamp"] / MS_PER_S, f"{where}: field timestamp "
                              "(in seconds)", WorkloadError)
    if ids and n_in <= (len(ids) - 1) * BLOCK_TOKENS:
        raise WorkloadError(
            f"{where}: field hash_ids has {len(ids)} blocks of {BLOCK_TOKENS} tokens, "
            f"more than input_length = {n_in} can fill"
        )
    t_s = float(values["timestamp"]) / MS_PER_S
    turn = Turn(n_in, max(1, int(values["output_length"])), tuple(ids), BLOCK_TOKENS, t_s=t_s)
    return t_s, turn


def chain_sessions(rows: list[tuple[float, Turn, str]], name: str) -> list[Session]:
    """Group rows into conversations by block-prefix extension, in timestamp order."""
    sessions: list[Session] = []
    by_last: dict[int, list[int]] = {}  # last hash id of a session's latest turn -> sessions
    for t_s, turn, where in sorted(rows, key=lambda r: r[0]):
        parent = None
        ids = turn.hash_ids
        for pos in range(len(ids) - 1, -1, -1):
            for idx in by_last.get(ids[pos], ()):
                prev = sessions[idx].turns[-1].hash_ids
                if len(prev) == pos + 1 and prev == ids[: pos + 1]:
                    parent = idx
                    break
            if parent is not None:
                break
        if parent is None:
            sessions.append(Session(f"{name}#{len(sessions)}", [turn], "global", where,
                                    {"format": "mooncake"}))
            idx = len(sessions) - 1
        else:
            sess = sessions[parent]
            prev_last = sess.turns[-1].hash_ids[-1]
            by_last[prev_last].remove(parent)
            gap = max(0.0, t_s - sess.turns[-1].t_s)
            sess.turns.append(Turn(turn.input_tokens, turn.output_tokens, ids, BLOCK_TOKENS,
                                   think_time_s=gap, t_s=t_s))
            idx = parent
        if ids:
            by_last.setdefault(ids[-1], []).append(idx)
    return sessions
