"""The kv-cache-tester / weka session format (Claude Code traces): one JSON object per session,
`{id, block_size, hash_id_scope, requests: [...]}`, requests of type "n"/"s" and "subagent"
(with nested requests). Subagent requests are replayed inline, in the parent's lane, at the
subagent's position: the parent waits for a foreground subagent, and its hash ids live in the
parent's scope, so prefix reuse between parent and subagent is kept."""

from __future__ import annotations

import math
from typing import Any

from kvbench import bounds
from kvbench.errors import WorkloadError, shown
from kvbench.workload.session import Session, Turn

REQUEST_TYPES = ("n", "s", "subagent")
MAX_BLOCK = 1 << 20  # tokens per hash block; real traces use 64 (Mooncake: 512)


def _need(obj: dict, key: str, kinds: tuple[type, ...], where: str, path: str) -> Any:
    if key not in obj:
        raise WorkloadError(f"{where}: field {path}.{key} is missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, kinds):
        allowed = " or ".join(k.__name__ for k in kinds)
        raise WorkloadError(f"{where}: field {path}.{key} = {shown(value)} must be {allowed}")
    return value


# each time field within its physical range (kvbench/bounds.py)
_TIMES = {"t": bounds.TRACE_TIME_S, "think_time": bounds.IDLE_S,
          "api_time": bounds.SERVER_TIME_S}


def _opt_float(obj: dict, key: str, where: str, path: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise WorkloadError(f"{where}: field {path}.{key} = {shown(value)} must be a finite "
                            "number >= 0")
    _TIMES[key].check(value, f"{where}: field {path}.{key}", WorkloadError)
    return float(value)


def _turn(req: dict, block: int, where: str, path: str, agent: str | None) -> Turn:
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
    return Turn(
        input_tokens=n_in, output_tokens=max(1, n_out), hash_ids=tuple(ids), block_tokens=block,
        think_time_s=_opt_float(req, "think_time", where, path) or 0.0,
        api_time_s=_opt_float(req, "api_time", where, path),
        t_s=_opt_float(req, "t", where, path) or 0.0, agent=agent,
    )


def parse_session(obj: Any, where: str) -> Session:
    """Validate one session object; `where` is "file:line" for error messages."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: a session must be a JSON object, got {type(obj).__name__}")
    sid = str(obj.get("id", where))
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
            turns.append(_turn(req, block, where, path, None))
            continue
        agent = str(req.get("agent_id") or f"subagent_{i:03d}")
        inner = _need(req, "requests", (list,), where, path)
        for j, sub in enumerate(inner):
            if not isinstance(sub, dict):
                raise WorkloadError(f"{where}: field {path}.requests[{j}] must be an object")
            turn = _turn(sub, block, where, f"{path}.requests[{j}]", agent)
            if j == 0 and turn.think_time_s == 0.0:
                # the spawn happens after the parent's previous turn; inherit the subagent's gap
                gap = _opt_float(req, "think_time", where, path) or 0.0
                turn = Turn(**{**_asdict(turn), "think_time_s": gap})
            turns.append(turn)
    if not turns:
        raise WorkloadError(f"{where}: field requests is empty: a session needs at least one turn")
    namespace = sid if scope == "local" else "global"
    return Session(sid, turns, namespace, where, {"format": "weka", "block_size": block})


def _asdict(turn: Turn) -> dict:
    return {name: getattr(turn, name) for name in Turn.__slots__}
