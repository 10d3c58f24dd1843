"""The kv-cache-tester / weka session format (Claude Code traces): one JSON object per session,
`{id, block_size, hash_id_scope, requests: [...]}`, requests of type "n"/"s" and "subagent"
(with nested requests). A subagent becomes a `Branch` as agentx-harness 1.0.12 builds its
SPAWN/JOIN (aiperf/dataset/loader/weka_trace.py `_reconstruct_serial`): spawned by the last
root request before it, joined by the first later root request that starts at or after the
subagent's recorded end (`_sa_end_seconds`: t + duration_ms, else its last request's end),
in the background when none does, dropped when no root request precedes it; subagents with
the same spawn and join share one start (the earliest), each one's first request at its
recorded offset from it. Inner `t` before the spawn marker is relative to it
(`_subagent_request_absolute_t`). The gap before a request is its stream's end-to-start
idle time, `t - (t_prev + api_time_prev)` (`_end_to_start_delay_ms`; a missing api_time
counts 0), where both requests have a recorded `t`, else its `think_time`. Hash ids live
in the session's scope, subagents included, so prefix reuse between parent and subagent is
kept."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvbench import bounds
from kvbench.errors import WorkloadError, shown
from kvbench.redaction import redacted_id
from kvbench.workload.blocks import Blocks, common_prefix
from kvbench.workload.session import Branch, Session, Turn

REQUEST_TYPES = ("n", "s", "subagent")
MAX_BLOCK = 1 << 20  # tokens per hash block; real traces use 64 (Mooncake: 512)
# weka_trace.py `_JOIN_EPSILON_SECONDS`: a root request this close after a subagent's end joins it
JOIN_EPSILON_S = 1e-6


def _need(obj: dict, key: str, kinds: tuple[type, ...], where: str, path: str) -> Any:
    if key not in obj:
        raise WorkloadError(f"{where}: field {path}.{key} is missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, kinds):
        allowed = " or ".join(k.__name__ for k in kinds)
        raise WorkloadError(f"{where}: field {path}.{key} = {shown(value)} must be {allowed}")
    return value


# each time field within its physical range (kvbench/bounds.py)
_TIMES = {"t": (bounds.TRACE_TIME_S, 1), "think_time": (bounds.IDLE_S, 1),
          "api_time": (bounds.SERVER_TIME_S, 1), "duration_ms": (bounds.TRACE_TIME_S, 1000)}


def _opt_float(obj: dict, key: str, where: str, path: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise WorkloadError(f"{where}: field {path}.{key} = {shown(value)} must be a finite "
                            "number >= 0")
    rng, per_s = _TIMES[key]
    rng.check(value / per_s, f"{where}: field {path}.{key}" + (" (in seconds)" if per_s != 1
                                                                else ""), WorkloadError)
    return float(value)


@dataclass(frozen=True, slots=True)
class _Subagent:
    after: int  # position among the root's requests of the last one before it (-1: none)
    agent: str
    first: int  # its first turn in the session's turns
    count: int
    spawn_t: float
    end_t: float


# A request's ids are held as runs (workload/blocks.py) when that takes at most a quarter of
# the entries: kv-cache-tester numbers a session's blocks in order, so the bundled Claude Code
# sessions' 7.8M ids are 12,112 runs, and a session holds its contexts' growth, not every
# turn's whole list
RUNS_PER_ID = 0.25


def _held(ids: list[int], prev: list[int], prev_held: Sequence[int]) -> Sequence[int]:
    """`ids` as runs or as a tuple; `prev` is the stream's previous request's ids (`prev_held`
    as held), whose runs are reused for the prefix the two share."""
    c = 0
    if isinstance(prev_held, Blocks) and ids[:1] == prev[:1]:
        c = common_prefix(prev, ids)
    runs = list(prev_held.prefix(c).runs) if c else []
    for h in ids[c:]:
        if runs and runs[-1][1] == h:
            runs[-1] = (runs[-1][0], h + 1)
        else:
            runs.append((h, h + 1))
    if len(runs) > RUNS_PER_ID * len(ids):
        return tuple(ids)
    return Blocks(runs)


def _turn(req: dict, block: int, where: str, path: str, agent: str | None,
          offset_s: float = 0.0, prev: tuple[list[int], Sequence[int]] = ([], ())) -> Turn:
    """One request; `offset_s` is added to a `t` recorded before it (a subagent's inner
    request relative to its spawn marker); `prev` is its stream's previous request (its raw
    ids and the ids as held)."""
    n_in = _need(req, "in", (int,), where, path)
    n_out = _need(req, "out", (int,), where, path)
    ids = _need(req, "hash_ids", (list,), where, path)
    if n_in < 1 or n_out < 0:
        raise WorkloadError(
            f"{where}: field {path}.in/out = {n_in}/{n_out}: need in >= 1, out >= 0")
    # within the longest context and response a model has: a turn of 10^9 tokens once made
    # replay build a 5.8 GB prompt
    bounds.CONTEXT_TOKENS.check(n_in, f"{where}: field {path}.in", WorkloadError)
    bounds.OUTPUT_TOKENS.check(max(1, n_out), f"{where}: field {path}.out", WorkloadError)
    for i, h in enumerate(ids):
        if isinstance(h, bool) or not isinstance(h, int):
            raise WorkloadError(
                f"{where}: field {path}.hash_ids[{i}] = {shown(h)} must be an integer")
    if ids and n_in <= (len(ids) - 1) * block:
        raise WorkloadError(
            f"{where}: field {path}.hash_ids has {len(ids)} blocks of {block} tokens, "
            f"more than in = {n_in} tokens can fill"
        )
    t = _opt_float(req, "t", where, path)
    if t is not None and t + JOIN_EPSILON_S < offset_s:
        t += offset_s
    return Turn(
        input_tokens=n_in, output_tokens=max(1, n_out), hash_ids=_held(ids, *prev),
        block_tokens=block,
        think_time_s=_opt_float(req, "think_time", where, path) or 0.0,
        api_time_s=_opt_float(req, "api_time", where, path),
        t_s=t if t is not None else 0.0, agent=agent,
    )


def _stream_gaps(turns: list[Turn], timed: list[bool]) -> list[Turn]:
    """Each turn's gap after the previous one of its stream ended: from the recorded `t` of
    both (the harness's end-to-start delay, api_time 0 where absent), else the trace's
    think_time."""
    out = []
    for k, turn in enumerate(turns):
        if k and timed[k] and timed[k - 1]:
            prev = turns[k - 1]
            gap = max(0.0, turn.t_s - prev.t_s - (prev.api_time_s or 0.0))
            turn = Turn(**{**_asdict(turn), "think_time_s": round(gap, 6)})
        out.append(turn)
    return out


def parse_session(obj: Any, where: str) -> Session:
    """Validate one session object; `where` is "file:line" for error messages."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: a session must be a JSON object, got {type(obj).__name__}")
    # ids reach every record and the correlation header: one shaped like a credential is
    # written as a stable id of its own (redaction.redacted_id), never as itself
    sid = redacted_id(str(obj.get("id", where)))
    block = obj.get("block_size", 64)
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= MAX_BLOCK:
        raise WorkloadError(f"{where}: field block_size = {shown(block)} must be an integer "
                            f"in 1..{MAX_BLOCK}")
    scope = obj.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise WorkloadError(
            f"{where}: field hash_id_scope = {shown(scope)}; allowed: local, global")
    reqs = _need(obj, "requests", (list,), where, "session")
    turns: list[Turn] = []
    roots: list[int] = []  # indexes into turns of the root's requests
    roots_timed: list[bool] = []
    root_prev: tuple[list[int], Sequence[int]] = ([], ())
    subagents: list[_Subagent] = []
    for i, req in enumerate(reqs):
        path = f"requests[{i}]"
        if not isinstance(req, dict):
            raise WorkloadError(f"{where}: field {path} = {shown(req)} must be an object")
        kind = req.get("type", "n")
        if kind not in REQUEST_TYPES:
            raise WorkloadError(
                f"{where}: field {path}.type = {shown(kind)}; allowed: {', '.join(REQUEST_TYPES)}"
            )
        if kind != "subagent":
            roots.append(len(turns))
            roots_timed.append(req.get("t") is not None)
            turns.append(_turn(req, block, where, path, None, prev=root_prev))
            root_prev = (req["hash_ids"], turns[-1].hash_ids)
            continue
        agent = redacted_id(str(req.get("agent_id") or f"subagent_{i:03d}"))
        spawn_t = _opt_float(req, "t", where, path) or 0.0
        inner = _need(req, "requests", (list,), where, path)
        own: list[Turn] = []
        timed: list[bool] = []
        prev: tuple[list[int], Sequence[int]] = ([], ())
        for j, sub in enumerate(inner):
            if not isinstance(sub, dict):
                raise WorkloadError(f"{where}: field {path}.requests[{j}] must be an object")
            own.append(_turn(sub, block, where, f"{path}.requests[{j}]", agent, spawn_t,
                             prev))
            prev = (sub["hash_ids"], own[-1].hash_ids)
            timed.append(sub.get("t") is not None)
        if own and own[0].think_time_s == 0.0:
            # the spawn happens after the parent's previous turn; inherit the subagent's gap
            gap = _opt_float(req, "think_time", where, path) or 0.0
            own[0] = Turn(**{**_asdict(own[0]), "think_time_s": gap})
        own = _stream_gaps(own, timed)
        if own:
            end_t = _subagent_end_s(req, own, where, path, spawn_t)
            subagents.append(_Subagent(len(roots) - 1, agent, len(turns), len(own), spawn_t,
                                       end_t))
            turns.extend(own)
    if not turns:
        raise WorkloadError(f"{where}: field requests is empty: a session needs at least one turn")
    for k, turn in zip(roots, _stream_gaps([turns[k] for k in roots], roots_timed),
                       strict=True):
        turns[k] = turn
    namespace = sid if scope == "local" else "global"
    # every request has its recorded time: the tree can be placed at an instant of it
    timed = all(roots_timed) and all(
        sub.get("t") is not None for r in reqs if r.get("type") == "subagent"
        for sub in r["requests"])
    meta = {"format": "weka", "block_size": block, "timed": timed}
    # the trace's system and tool prefix (kv-cache-tester headers), for the corpus fit
    meta.update({k: obj[k] for k in ("system_tokens", "tool_tokens")
                 if isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool)})
    return Session(sid, turns, namespace, where, meta, _branches(turns, roots, subagents))


def _subagent_end_s(req: dict, own: list[Turn], where: str, path: str, spawn_t: float) -> float:
    """weka_trace.py `_sa_end_seconds`: t + duration_ms (a negative one is 0), else the end
    of its last request, else its start."""
    duration_ms = _opt_float(req, "duration_ms", where, path)
    if duration_ms is not None:
        return spawn_t + duration_ms / 1000.0
    return max(t.t_s + (t.api_time_s or 0.0) for t in own)


def _branches(turns: list[Turn], roots: list[int],
              subagents: list[_Subagent]) -> tuple[Branch, ...]:
    """SPAWN/JOIN from the recorded times (module docstring)."""
    placed = []
    for sa in subagents:
        if sa.after < 0:
            continue  # no root request before it: nothing spawns it
        join = next((roots[r] for r in range(sa.after + 1, len(roots))
                     if turns[roots[r]].t_s + JOIN_EPSILON_S >= sa.end_t), None)
        placed.append((roots[sa.after], join, sa))
    group_start: dict[tuple[int, int | None], float] = {}
    for spawn, join, sa in placed:
        key = (spawn, join)
        group_start[key] = min(group_start.get(key, sa.spawn_t), sa.spawn_t)
    return tuple(
        Branch(sa.agent, sa.first, sa.count, spawn, join,
               round(max(0.0, turns[sa.first].t_s - group_start[(spawn, join)]), 6))
        for spawn, join, sa in placed)


def _asdict(turn: Turn) -> dict:
    return {name: getattr(turn, name) for name in Turn.__slots__}
