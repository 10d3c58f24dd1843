"""The warm-up before the profiling phase, as agentx-harness 1.0.12 runs it
(aiperf/timing/strategies/agentic_replay.py: `_execute_warmup`, `_start_accelerated_warmup`,
`finalize_phase`, `_execute_profiling`):

1. each lane's first tree is placed at an instant t* of its recording (workload/tree.py
   `first_start`: the lane's live streams and their next requests);
2. t* primers: every live stream's last request before t* is sent with its whole history
   and one output token, spread so that every lane's t* lands together (a request recorded
   `lead` before its t* leaves `max_lead - lead` after the warm-up starts, leads capped at
   the system idle cap: `_capped_warmup_lead_ms`); all must come back;
3. cache pressure (`--warmup-requests-per-lane N`): each lane goes on replaying its tree with
   no idle delay and one output token per request until it has sent N more requests (a tree
   that ends makes way for the lane's next session from its first turn); then every request
   in flight drains;
4. handoff: each live stream resumes at its next request, due at that request's recorded
   time after the tree's origin (t*, or a recycled tree's first request), less the earliest
   of them all, so the first request of the profiling phase leaves at once and the rest keep
   their recorded spacing (`_handoff_replay_offset_ms`, `_profiling_phase_t0_offset_ms`).

A root request of the warm-up that fails ends the run before the profiling phase
(`report_warmup_failures`: "PROFILING must not start with a degraded set of trajectories"),
and so does a warm-up that does not drain within the grace period (`--warmup-grace-period`).
The profiling phase then lasts the run's duration, counted from its own start."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from time import perf_counter_ns

from kvbench.replay.lanes import WARMUP_MAX_TOKENS, Lanes, Tree
from kvbench.workload.tree import ROOT, Ready, Resume, Warm, phase_start, place_first


@dataclass(slots=True)
class _Placed:
    tree: Tree
    resume: Resume
    origin_s: float  # the recorded instant the tree's offsets count from
    warm: list[Warm]


def _place(lanes: Lanes, lane: int) -> _Placed | None:
    p = place_first(lanes.pool, lanes.bounds, lane, lanes.cfg.system_idle_cap_s,
                    lanes.make_run)
    if p is None:
        return None
    return _Placed(lanes.new_tree(lane, p.session, p.pass_no, run=p.run), p.resume,
                   p.origin_s, p.warm)


async def warm_up(lanes: Lanes, lane_ids: list[int]) -> None:
    """Steps 1-4 of the module docstring; afterwards `lanes.first_trees` holds each lane's
    tree and its first sends of the profiling phase (due from when this returns)."""
    lanes.warming = True
    try:
        placed = {lane: p for lane in lane_ids if (p := _place(lanes, lane)) is not None}
        await _within_grace(lanes, _primers(lanes, placed), "the t* warm-up requests")
        if lanes.stopping:
            return
        per_lane = lanes.bounds.warmup_per_lane
        if per_lane:
            await _within_grace(lanes, _pressure(lanes, placed, per_lane),
                                "the cache-pressure warm-up")
        if lanes.failed_warmup:
            lanes.halt(f"warm-up failed: {len(lanes.failed_warmup)} request(s) of root "
                       f"conversations failed (first: {lanes.failed_warmup[0]}); the "
                       "profiling phase would start from a degraded set of trajectories")
        if lanes.stopping:
            return
    finally:
        lanes.warming = False
        lanes.quota.clear()
    _handoff(lanes, placed)


async def _within_grace(lanes: Lanes, work, what: str) -> None:
    grace = lanes.cfg.warmup_grace_s
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait_for(task, grace)
    except TimeoutError:
        lanes.halt(f"warm-up: {what} did not drain within the {grace:g} s grace period")


async def _primers(lanes: Lanes, placed: dict[int, _Placed]) -> None:
    leads = [w.lead_s for p in placed.values() for w in p.warm if w.lead_s is not None]
    max_lead = max(leads, default=0.0)
    start_ns = perf_counter_ns()

    async def one(p: _Placed, w: Warm) -> None:
        turn = p.tree.run.turns[w.k]
        if turn is None:
            return
        ready = Ready(w.stream, w.k, 0.0)
        prompt = await lanes._prompt(p.tree, ready, turn)  # rendered before it is due
        offset = (max_lead - w.lead_s) if w.lead_s is not None else 0.0
        wait_s = offset / lanes.cfg.time_scale - (perf_counter_ns() - start_ns) / 1e9
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        if lanes.stopping:
            return
        target = start_ns + int(offset / lanes.cfg.time_scale * 1e9) if offset > 0 else None
        ok, _, _ = await lanes._send(p.tree, ready, turn, prompt, target, True, WARMUP_MAX_TOKENS)
        if not ok and w.stream == ROOT:
            lanes.failed_warmup.append(p.tree.key)
            # one terminal root failure aborts at once (the harness does not wait for the
            # rest of the warm-up to drain)
            lanes.halt(f"warm-up failed: the t* request of {p.tree.key} (turn {w.k}) failed")

    await asyncio.gather(*(one(p, w) for p in placed.values() for w in p.warm))


async def _pressure(lanes: Lanes, placed: dict[int, _Placed], per_lane: int) -> None:
    """Each lane replays on with no idle delay until it has sent `per_lane` requests."""
    for lane in placed:
        lanes.quota[lane] = per_lane

    async def lane_run(lane: int, p: _Placed) -> None:
        tree = lanes.new_tree(lane, p.tree.session, p.tree.pass_no, zero_delay=True,
                              prompts=p.tree.prompts)
        ready = tree.run.resume(p.resume, lanes.now_s())
        origin = p.origin_s
        while not lanes.stopping:
            await lanes.drive(tree, ready)
            if not tree.run.done or lanes.quota[lane] <= 0:
                break
            got = lanes.next_tree(lane, zero_delay=True)
            if got is None:
                break
            tree, ready = got
            origin = tree.run.origin_s()
        # the lane's state at the handoff: its live tree, where it stopped
        placed[lane] = _Placed(tree, tree.run.handoff(origin), origin, [])

    await asyncio.gather(*(lane_run(lane, p) for lane, p in list(placed.items())))


def _handoff(lanes: Lanes, placed: dict[int, _Placed]) -> None:
    """Every lane's first tree of the profiling phase, due from now."""
    order = list(placed)
    resumes = phase_start([(placed[lane].tree.run, placed[lane].resume) for lane in order])
    now = lanes.now_s()
    for lane, resume in zip(order, resumes, strict=True):
        p = placed[lane]
        tree = lanes.new_tree(lane, p.tree.session, p.tree.pass_no, prompts=p.tree.prompts)
        lanes.first_trees[lane] = (tree, tree.run.resume(resume, now))
