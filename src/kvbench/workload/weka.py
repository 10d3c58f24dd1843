"""The kv-cache-tester / weka session format (Claude Code traces): one JSON object per session,
`{id, block_size, hash_id_scope, requests: [...]}`, requests of type "n"/"s" and "subagent"
(with nested requests). The tree is built as agentx-harness 1.0.12 builds it
(aiperf/dataset/loader/weka_trace.py `_build_reconstruction_plans`, `_reconstruct_serial`):

- the root requests are split into agent chains by their hash ids (`workload/chains.py`,
  `_detect_and_split_flat_chains`): the main chain is the root stream, every other chain a
  stream spawned by the last main request before its first request (the first main request
  when none is), joined by the first later main request that starts at or after the chain's
  last request ended (background when none does);
- a subagent entry's requests are split the same way (`_expand_subagent_to_child_plans`);
  all its chains are spawned by the last main request before the entry (dropped when none
  is) and joined by the first later one that starts at or after the subagent's recorded end
  (`_sa_end_seconds`: t + duration_ms, else its last request's end);
- streams with the same spawn and join share one start (the earliest), each first request
  at its recorded offset from it. Inner `t` before the spawn marker is relative to it
  (`_subagent_request_absolute_t`).

The gap before a request is its stream's end-to-start idle time, `t - (t_prev +
api_time_prev)` (`_end_to_start_delay_ms`; a missing api_time counts 0), where both requests
have a recorded `t`, else its `think_time`. `Session.turns` holds the main chain in order,
each other stream's requests right after the main request that spawns it. Hash ids live in
the session's scope, subagents included, so prefix reuse between streams is kept."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvbench import bounds
from kvbench.errors import WorkloadError, shown
from kvbench.redaction import redacted_id
from kvbench.workload.blocks import Blocks, common_prefix
from kvbench.workload.chains import Call, Chains, partition
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
    request relative to its spawn marker); `prev` is the previous request of its recorded
    list (its raw ids and the ids as held: storage only, the chains are found later)."""
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
        recorded_output_tokens=n_out if n_out < 1 else None,
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


@dataclass(slots=True)
class _Request:
    turn: Turn
    call: Call
    timed: bool
    ids: list[int]  # as recorded


@dataclass(slots=True)
class _Entry:
    pos: int  # position among the session's requests
    agent: str
    spawn_t: float
    end_t: float
    think_s: float  # the subagent's own think_time: its first request's gap
    chains: Chains
    by_pos: dict[int, _Request]  # its requests by position in the entry
    prefix_tokens: int = 0  # its declared tool + system tokens


def _request(req: dict, block: int, where: str, path: str, pos: int, agent: str | None,
             offset_s: float = 0.0, prev: _Request | None = None) -> _Request:
    turn = _turn(req, block, where, path, agent, offset_s,
                 ([], ()) if prev is None else (prev.ids, prev.turn.hash_ids))
    model = req.get("model")
    call = Call(pos, turn.t_s, turn.api_time_s, turn.hash_ids,
                model if isinstance(model, str) else "", turn.input_tokens, req["out"])
    return _Request(turn, call, req.get("t") is not None, req["hash_ids"])


def parse_session(obj: Any, where: str, split_chains: bool = True) -> Session:
    """Validate one session object; `where` is "file:line" for error messages. Without
    `split_chains` the streams are the trace's own (the root requests, one per subagent
    entry): the sessions as recorded, which the corpus generator is fitted to."""
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
    roots: list[_Request] = []
    entries: list[_Entry] = []
    timed = True  # every request has its recorded time: the tree can be placed in it
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
            roots.append(_request(req, block, where, path, i, None,
                                  prev=roots[-1] if roots else None))
            timed &= roots[-1].timed
            continue
        agent = redacted_id(str(req.get("agent_id") or f"subagent_{i:03d}"))
        spawn_t = _opt_float(req, "t", where, path) or 0.0
        inner = _need(req, "requests", (list,), where, path)
        own: list[_Request] = []
        for j, sub in enumerate(inner):
            if not isinstance(sub, dict):
                raise WorkloadError(f"{where}: field {path}.requests[{j}] must be an object")
            own.append(_request(sub, block, where, f"{path}.requests[{j}]", j, agent, spawn_t,
                                own[-1] if own else None))
            timed &= own[-1].timed
        if own:
            end_t = _subagent_end_s(req, [r.turn for r in own], where, path, spawn_t)
            think = _opt_float(req, "think_time", where, path) or 0.0
            entries.append(_Entry(i, agent, spawn_t, end_t, think,
                                  partition([r.call for r in own], always=True, split=split_chains),
                                  {r.call.pos: r for r in own}, _declared(req)))
    if not roots and not entries:
        raise WorkloadError(f"{where}: field requests is empty: a session needs at least one turn")
    namespace = sid if scope == "local" else "global"
    meta = {"format": "weka", "block_size": block, "timed": timed}
    # the trace's system and tool prefix (kv-cache-tester headers), for the corpus fit
    meta.update({k: obj[k] for k in ("system_tokens", "tool_tokens")
                 if isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool)})
    turns, branches, after, prefixes = _tree(roots, entries, split_chains, _declared(obj))
    if any(prefixes.values()):
        # each stream's declared prefix, keyed by its agent ("" the root's main chain): the
        # system message its turn 0 starts with under the AgentX profile (workload/messages.py)
        meta["prompt_prefix_tokens"] = {k: n for k, n in prefixes.items() if n}
    if not turns:
        raise WorkloadError(f"{where}: field requests: no request has a root request before "
                            "it to spawn it")
    return Session(sid, turns, namespace, where, meta, branches, after)


def _declared(obj: dict) -> int:
    """The tool + system tokens a trace (or a subagent entry) declares its prompts start with
    (kv-cache-tester headers; absent: 0)."""
    return sum(v for k in ("tool_tokens", "system_tokens")
               if isinstance(v := obj.get(k), int) and not isinstance(v, bool) and v > 0)


def _chain_prefix(declared: int, block: int, base: Sequence[int], first: Sequence[int]) -> int:
    """A chain split from a main chain starts with the declared prefix only when its first
    request provably does: its first ceil(declared / block) blocks are the main chain's
    (agentx-harness 1.0.12 weka_trace.py:631-660 `_chain_init_tokens`)."""
    n = -(-declared // block)
    return declared if n and len(first) >= n and len(base) >= n and \
        list(first[:n]) == list(base[:n]) else 0


def _first_ids(reqs: list[_Request]) -> list[int]:
    return next((r.ids for r in reqs if r.ids), [])


def _subagent_end_s(req: dict, own: list[Turn], where: str, path: str, spawn_t: float) -> float:
    """weka_trace.py `_sa_end_seconds`: t + duration_ms (a negative one is 0), else the end
    of its last request, else its start."""
    duration_ms = _opt_float(req, "duration_ms", where, path)
    if duration_ms is not None:
        return spawn_t + duration_ms / 1000.0
    return max(t.t_s + (t.api_time_s or 0.0) for t in own)


@dataclass(slots=True)
class _Stream:
    agent: str
    turns: list[Turn]
    group: tuple[str, int, int | None]  # (kind, spawn, join): its branch in the harness
    scope: int  # the agent it belongs to: -1 the root's, else its subagent entry's
    timed: list[bool]


def _stream_turns(reqs: list[_Request], agent: str | None) -> list[Turn]:
    turns = [r.turn if r.turn.agent == agent else Turn(**{**_asdict(r.turn), "agent": agent})
             for r in reqs]
    return _stream_gaps(turns, [r.timed for r in reqs])


def _tree(roots: list[_Request], entries: list[_Entry], split_chains: bool, declared: int
          ) -> tuple[list[Turn], tuple[Branch, ...], dict[int, tuple[int, ...]], dict[str, int]]:
    """The root stream (the main chain of the root requests) and every other stream with
    its SPAWN/JOIN, laid out as `Session.turns` and `Branch`es (module docstring), and each
    stream's declared prefix tokens (by agent, "" the root)."""
    by_pos = {r.call.pos: r for r in roots}
    split = partition([r.call for r in roots], split=split_chains)
    main = [by_pos[c.pos] for c in split.main]
    prefixes = {"": declared}
    at = [r.call.pos for r in main]  # each main request's position among the session's
    by_at = sorted(range(len(main)), key=lambda p: at[p])

    def spawn_of(pos: int) -> int | None:
        return max((p for p in range(len(main)) if at[p] < pos), default=None)

    def join_of(pos: int, end_t: float) -> int | None:
        return next((p for p in by_at
                     if at[p] > pos and main[p].turn.t_s + JOIN_EPSILON_S >= end_t), None)

    streams: list[_Stream] = []
    starts: dict[tuple[str, int, int | None], float] = {}
    for e in entries:  # subagents, a branch per (spawn, join)
        spawn = spawn_of(e.pos)
        if spawn is None:
            continue  # no root request before it: nothing spawns it
        group = ("sa", spawn, join_of(e.pos, e.end_t))
        starts[group] = min(starts.get(group, e.spawn_t), e.spawn_t)
        named = [(e.agent, e.chains.main)] + [(f"{e.agent}:{suffix}", calls)
                                              for suffix, calls in e.chains.workers]
        base = _first_ids([e.by_pos[c.pos] for c in e.chains.main])
        prefixes[e.agent] = e.prefix_tokens
        for name, calls in named[1:]:  # weka_trace.py:443-455: its first hash-bearing request
            first = [e.by_pos[c.pos] for c in calls]
            prefixes[name] = _chain_prefix(e.prefix_tokens, first[0].turn.block_tokens, base,
                                           _first_ids(first))
        for n, (name, calls) in enumerate(named):
            turns = _stream_turns([e.by_pos[c.pos] for c in calls], name)
            if n == 0 and turns[0].think_time_s == 0.0:  # the spawn follows the parent's
                turns[0] = Turn(**{**_asdict(turns[0]), "think_time_s": e.think_s})  # turn
            streams.append(_Stream(name, turns, group, e.pos,
                                   [e.by_pos[c.pos].timed for c in calls]))
    base = _first_ids(main)
    for name, calls in split.workers:  # detected flat chains: spawned by turn 0 at worst
        first = calls[0].pos
        # weka_trace.py:1171-1177: the chain's first request, hash-bearing or not
        prefixes[name] = _chain_prefix(declared, by_pos[first].turn.block_tokens, base,
                                       by_pos[first].ids)
        group = ("flat", spawn_of(first) or 0, join_of(first, max(c.end_s for c in calls)))
        starts[group] = min(starts.get(group, calls[0].t_s), calls[0].t_s)
        streams.append(_Stream(name, _stream_turns([by_pos[c.pos] for c in calls], name),
                               group, -1, [by_pos[c.pos].timed for c in calls]))
    turns: list[Turn] = []
    index: list[int] = []  # Session.turns index of each main request
    firsts: dict[int, int] = {}
    for p, turn in enumerate(_stream_turns(main, None)):
        index.append(len(turns))
        turns.append(turn)
        for s, st in enumerate(streams):
            if st.group[1] == p:
                firsts[s] = len(turns)
                turns.extend(st.turns)
    scopes: dict[int, list[list[int]]] = {-1: [[k for k, r in zip(index, main, strict=True)
                                               if r.timed]]}
    for s, st in enumerate(streams):
        scopes.setdefault(st.scope, []).append(
            [firsts[s] + i for i, timed in enumerate(st.timed) if timed])
    after = {}
    for lists in scopes.values():
        after.update(_happens_before(turns, lists))
    return turns, tuple(
        Branch(st.agent, firsts[s], len(st.turns), index[st.group[1]],
               None if st.group[2] is None else index[st.group[2]],
               round(max(0.0, st.turns[0].t_s - starts[st.group]), 6))
        for s, st in enumerate(streams)), after, prefixes


def _happens_before(turns: list[Turn], streams: list[list[int]]) -> dict[int, tuple[int, ...]]:
    """agentx-harness 1.0.12 aiperf/timing/replay_dependencies.py
    `infer_cross_stream_predecessors` (:69-118), applied per agent (`_replay_scope_for_session`,
    weka_trace.py:49-59: the root with its flat chains, each subagent with its chains) and
    enforced on dispatch (`ReplayBarrierCoordinator`, :164-443): a request waits, on every
    other stream of its agent, for the latest request recorded to have ended by its start
    (start before, end at or before it), except one that another such request followed."""
    if len(streams) < 2:
        return {}
    span = {k: (turns[k].t_s, turns[k].t_s + (turns[k].api_time_s or 0.0))
            for ks in streams for k in ks}
    out: dict[int, tuple[int, ...]] = {}
    for s, ks in enumerate(streams):
        for k in ks:
            start = span[k][0]
            frontier = []
            for o, other in enumerate(streams):
                done = [j for j in other if o != s and span[j][0] < start
                        and span[j][1] <= start]
                if done:
                    frontier.append(max(done, key=lambda j: (span[j][1], span[j][0], j)))
            keep = tuple(sorted(j for j in frontier if not any(
                span[j][0] < span[i][0] and span[j][1] <= span[i][0]
                for i in frontier if i != j)))
            if keep:
                out[k] = keep
    return out


def _asdict(turn: Turn) -> dict:
    return {name: getattr(turn, name) for name in Turn.__slots__}


FLAT_MARKERS = ("fa:", "aux:", "wg:")  # a detected flat chain's name (`_worker_suffix`)


def harness_stream_id(session_id: str, agent: str | None) -> str:
    """The harness's conversation id of a stream: the root's is the trace id, a subagent
    chain's `<id>::sa:<agent>[:<suffix>]`, a flat chain's `<id>::<suffix>`."""
    if agent is None:
        return session_id
    if agent.startswith(FLAT_MARKERS):
        return f"{session_id}::{agent}"
    return f"{session_id}::sa:{agent}"
