"""Agent chains: a weka trace records the requests of several agents as one flat list (a
Workflow fan-out, a subagent entry holding its own workers), and agentx-harness 1.0.12
takes them apart again by their hash ids before it replays them (on by default,
`WEKA_SPLIT_FLATTENED_AGENTS`). This module does the same partition, so kvbench replays the
streams the harness replays. Sources, agentx-harness 1.0.12 (aiperf/):

- dataset/loader/weka_agent_chains.py `detect_agent_chains` (:390-461): requests in (t,
  position) order; phase 1 (`_Phase1State.classify`, :343-387) appends a request to the chain
  whose last hash-bearing request is a whole prefix of it, has ended by its start and ran on
  the same model (deepest such tail, then the lowest chain: `_find_extension_target`,
  :464-487), else opens a new chain forked from the tail with the longest common prefix
  (`_max_lcp_chain`, :490-504); a request without hash ids stays on the first chain;
- phase 2 (`_resolve_seams`, :660-740; `_elect_continuation`, :571-621;
  `_rekey_leftover_forks`, :624-657): a fork off a tail that nothing extended later is that
  agent's continuation after a context edit (a seam), spliced back on: the deepest
  same-model fork that starts after the tail ended, unless it starts more than 3,600 s
  later sharing under half the tail's blocks (`WEKA_SEAM_MAX_GAP_SECONDS`,
  `WEKA_SEAM_MIN_OVERLAP_RATIO`, common/environment.py:415-443);
- dataset/loader/weka_trace.py `_split_off_preamble` (:562-608): a first request sharing no
  prefix with any other (a title-generation call) does not found the main chain; it rides
  it for replay;
- the names (`_worker_suffix`, weka_trace.py:266-290): a short one-shot is an `aux` sidecar
  (`is_aux_chain`, `is_reduction_chain`, weka_agent_chains.py:128-211, with the defaults of
  common/environment.py:444-540), a member of a concurrent fan-out off one fork point `wg`
  (`worker_group_assignment`, :247-312), any other an `fa` agent."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvbench.workload.blocks import common_prefix

EPSILON_S = 1e-6  # weka_agent_chains.py `_EPSILON_SECONDS`
SEAM_MAX_GAP_S = 3600.0
SEAM_MIN_OVERLAP = 0.5
TITLE_GEN_MAX_OUTPUT = 64  # weka_trace.py `_TITLE_GEN_MAX_OUTPUT_TOKENS`
AUX_MAX_REQUESTS = 1
AUX_ISL_RATIO = 0.10
AUX_ISL_FLOOR = 16384
REDUCTION_OSL_MAX = 4000
REDUCTION_RATIO = 20.0
WORKER_GROUP_MIN = 3


@dataclass(frozen=True, slots=True)
class Call:
    """What the partition reads of one recorded request; `pos` orders requests that start
    at the same instant (its position in the list it came from)."""

    pos: int
    t_s: float
    api_time_s: float | None
    hash_ids: Sequence[int]  # a tuple or `Blocks`
    model: str
    input_tokens: int
    output_tokens: int  # as recorded (0 allowed)

    @property
    def end_s(self) -> float:
        api = self.api_time_s
        return self.t_s + (api if api is not None and math.isfinite(api) and api > 0 else 0.0)


@dataclass(slots=True)
class _Fork:
    parent: int | None
    tail_pos: int | None
    depth: int
    t_s: float


@dataclass(slots=True)
class _Chain:
    calls: list[Call] = field(default_factory=list)
    fork: _Fork | None = None
    merged_into: int | None = None
    tail: Call | None = None  # the last hash-bearing call (phase 1)


@dataclass(frozen=True, slots=True)
class Chains:
    """A partition: the main chain (the agent of the first request) and the others, each
    in the order the harness replays it, with its name suffix."""

    main: list[Call]
    workers: list[tuple[str, list[Call]]]


def split_preamble(calls: list[Call]) -> tuple[list[Call], list[Call]]:
    """(preamble, rest): the earliest request when it shares no prefix with any other and is
    either short (<= 64 output tokens) or shares no block at all with the rest."""
    if len(calls) < 2:
        return [], calls
    ordered = sorted(calls, key=lambda c: (c.t_s, c.pos))
    first, rest = ordered[0], ordered[1:]
    if not first.hash_ids:
        return [], calls
    if any(common_prefix(first.hash_ids, c.hash_ids) > 0 for c in rest if c.hash_ids):
        return [], calls
    if first.output_tokens > TITLE_GEN_MAX_OUTPUT:
        seen = {h for c in rest for h in c.hash_ids}
        if not seen.isdisjoint(first.hash_ids):
            return [], calls
    return [first], sorted(rest, key=lambda c: c.pos)


def _extends(chains: list[_Chain], call: Call) -> int | None:
    best, best_len = None, -1
    for i, ch in enumerate(chains):
        tail = ch.tail
        if tail is None:
            continue
        n = len(tail.hash_ids)
        if n > len(call.hash_ids) or n <= best_len or tail.model != call.model:
            continue
        if tail.end_s > call.t_s + EPSILON_S or call.hash_ids[n - 1] != tail.hash_ids[-1]:
            continue
        if common_prefix(tail.hash_ids, call.hash_ids) == n:
            best, best_len = i, n
    return best


def _deepest_fork(chains: list[_Chain], call: Call) -> tuple[int | None, int]:
    best, key = None, (0, 0)
    for i, ch in enumerate(chains):
        if ch.tail is None:
            continue
        depth = common_prefix(ch.tail.hash_ids, call.hash_ids)
        if depth and (depth, len(ch.tail.hash_ids)) > key:
            best, key = i, (depth, len(ch.tail.hash_ids))
    return best, key[0]


def _last_hashed(chain: _Chain) -> Call | None:
    return next((c for c in reversed(chain.calls) if c.hash_ids), None)


def _phase1(ordered: list[Call]) -> tuple[list[_Chain], dict[int, int], dict[int, list[int]]]:
    chains: list[_Chain] = []
    owner: dict[int, int] = {}  # call pos -> chain
    forks: dict[int, list[int]] = {}  # tail call pos -> chains forked off it

    def put(i: int, call: Call) -> None:
        chains[i].calls.append(call)
        owner[call.pos] = i
        if call.hash_ids:
            chains[i].tail = call

    for call in ordered:
        if not chains:
            chains.append(_Chain())
        if not call.hash_ids or all(ch.tail is None for ch in chains):
            put(0, call)  # no evidence yet, or the first hash-bearing call: the main agent
            continue
        target = _extends(chains, call)
        if target is not None:
            put(target, call)
            continue
        parent, depth = _deepest_fork(chains, call)
        tail = chains[parent].tail if parent is not None else None
        fork = _Fork(parent, tail.pos if tail is not None else None, depth, call.t_s)
        chains.append(_Chain(fork=fork))
        put(len(chains) - 1, call)
        if fork.tail_pos is not None and depth > 0:
            forks.setdefault(fork.tail_pos, []).append(len(chains) - 1)
    return chains, owner, forks


def _elect(chains: list[_Chain], candidates: list[int], tail: Call) -> int | None:
    blocks = len(tail.hash_ids)

    def ok(i: int) -> bool:
        ch = chains[i]
        first = ch.calls[0]
        if ch.fork is None or ch.fork.depth <= 0 or tail.end_s > first.t_s + EPSILON_S:
            return False
        if first.model != tail.model:
            return False
        far = blocks and (first.t_s - tail.end_s > SEAM_MAX_GAP_S
                          and ch.fork.depth / blocks < SEAM_MIN_OVERLAP)
        return not far

    eligible = [i for i in candidates if ok(i)]
    if not eligible:
        return None
    return max(eligible, key=lambda i: (chains[i].fork.depth, -chains[i].fork.t_s, -i))


def _phase2(chains: list[_Chain], owner: dict[int, int], forks: dict[int, list[int]],
            by_pos: dict[int, Call]) -> None:
    alias: dict[int, int] = {}

    def live(i: int) -> int:
        while i in alias:
            i = alias[i]
        return i

    todo = sorted(forks)
    heapq.heapify(todo)
    done: set[int] = set()
    while todo:
        pos = heapq.heappop(todo)
        if pos in done:
            continue
        done.add(pos)
        own = live(owner[pos])
        tail = _last_hashed(chains[own])
        if tail is None or tail.pos != pos:
            continue  # the longer state went on: every fork of it is a spawn
        registered = [i for i in forks[pos] if chains[i].merged_into is None]
        chosen = _elect(chains, registered, by_pos[pos])
        if chosen is None:
            continue
        chains[own].calls.extend(chains[chosen].calls)
        for c in chains[chosen].calls:
            owner[c.pos] = own
        chains[chosen].merged_into = own
        alias[chosen] = own
        new_tail = _last_hashed(chains[own])
        if new_tail is None:
            continue
        moved = False
        for i in registered:
            ch = chains[i]
            if i == chosen or ch.merged_into is not None or ch.fork is None:
                continue
            depth = common_prefix(new_tail.hash_ids, ch.calls[0].hash_ids)
            if depth <= 0:
                continue
            ch.fork.tail_pos, ch.fork.depth, ch.fork.parent = new_tail.pos, depth, own
            forks.setdefault(new_tail.pos, []).append(i)
            moved = True
        if moved:
            done.discard(new_tail.pos)
            heapq.heappush(todo, new_tail.pos)
    for ch in chains:
        if ch.merged_into is None and ch.fork is not None and ch.fork.parent is not None:
            ch.fork.parent = live(ch.fork.parent)


def _detect(calls: list[Call]) -> tuple[list[_Chain], int, list[int]]:
    ordered = sorted(calls, key=lambda c: (c.t_s, c.pos))
    chains, owner, forks = _phase1(ordered)
    _phase2(chains, owner, forks, {c.pos: c for c in ordered})
    main = owner[ordered[0].pos]
    while chains[main].merged_into is not None:
        main = chains[main].merged_into
    workers = [i for i, ch in enumerate(chains) if ch.merged_into is None and i != main]
    workers.sort(key=lambda i: (chains[i].calls[0].t_s, chains[i].calls[0].pos))
    return chains, main, workers


def _is_aux(calls: list[Call], main_peak_in: int, main_model: str | None) -> bool:
    if not calls or len(calls) > AUX_MAX_REQUESTS:
        return False
    first = calls[0]
    if main_model is not None and first.model != main_model:
        return True
    return first.input_tokens < max(AUX_ISL_FLOOR, int(AUX_ISL_RATIO * main_peak_in))


def _is_reduction(calls: list[Call]) -> bool:
    if len(calls) != 1:
        return False
    first = calls[0]
    out = first.output_tokens
    return (0 < out < REDUCTION_OSL_MAX and first.input_tokens >= AUX_ISL_FLOOR
            and first.input_tokens > REDUCTION_RATIO * out)


def _groups(chains: list[_Chain], workers: list[int]) -> dict[int, tuple[int, int]]:
    """Worker-group coordinates: workers forked off one tail whose [start, end) intervals
    overlap, at least `WORKER_GROUP_MIN` of them."""
    buckets: dict[tuple[int, int], list[tuple[float, float, int, int]]] = {}
    for i in workers:
        ch = chains[i]
        f = ch.fork
        if f is None or f.depth <= 0 or f.parent is None or f.tail_pos is None or not ch.calls:
            continue
        item = (ch.calls[0].t_s, max(c.end_s for c in ch.calls), ch.calls[0].pos, i)
        buckets.setdefault((f.parent, f.tail_pos), []).append(item)
    comps: list[list[tuple[float, float, int, int]]] = []
    for items in buckets.values():
        items = sorted(items, key=lambda x: (x[0], x[2]))
        comp: list[tuple[float, float, int, int]] = []
        reach = -math.inf
        for item in items:  # sweep: an interval overlaps the component if it starts before
            if comp and item[0] >= reach:  # the latest end so far (touching does not)
                comps.append(comp)
                comp, reach = [], -math.inf
            comp.append(item)
            reach = max(reach, item[1])
        if comp:
            comps.append(comp)
    big = sorted((c for c in comps if len(c) >= WORKER_GROUP_MIN),
                 key=lambda c: min((x[0], x[2]) for x in c))
    return {i: (g, m) for g, comp in enumerate(big)
            for m, (_, _, _, i) in enumerate(sorted(comp, key=lambda x: (x[0], x[2])))}


def partition(calls: list[Call], *, always: bool = False, split: bool = True) -> Chains:
    """The chains of `calls`. The top level splits only more than one request and keeps the
    recorded order when nothing splits (`_detect_and_split_flat_chains`); a subagent entry
    (`always`) is always run through detection (`_expand_subagent_to_child_plans`). Without
    `split` (the harness's `WEKA_SPLIT_FLATTENED_AGENTS=false`) all is one chain, a subagent
    entry's in time order."""
    if not split and always:
        return Chains(sorted(calls, key=lambda c: (c.t_s, c.pos)), [])
    if not calls or not split or (not always and len(calls) < 2):
        return Chains(list(calls), [])
    preamble, rest = split_preamble(calls)
    chains, main, workers = _detect(rest)
    if not workers and not always:
        return Chains(list(calls), [])
    detected = chains[main].calls
    main_calls = sorted(preamble + detected, key=lambda c: (c.t_s, c.pos)) if preamble \
        else list(detected)
    peak = max((c.input_tokens for c in detected), default=0)
    model = detected[0].model if detected else None
    group = _groups(chains, workers)
    named = []
    for n, i in enumerate(workers):
        calls_i = chains[i].calls
        if _is_aux(calls_i, peak, model) or _is_reduction(calls_i):
            name = f"aux:{n:03d}"
        elif i in group:
            name = "wg:{:03d}_{:03d}".format(*group[i])
        else:
            name = f"fa:{n:03d}"
        named.append((name, list(calls_i)))
    return Chains(main_calls, named)
