"""The order in which one pass of a session tree sends its requests, clock-free: the replay
(wall clock, HTTP) and the simulator (virtual time) drive the same `TreeRun`.

A tree is its root stream and its subagent streams (`Session.tree()`). Each stream sends its
turns one after another, a turn when the previous one of its stream ended plus its think
time. A root turn's end spawns the branches it spawns, each first request at its recorded
offset; a root turn that joins branches waits, besides its own think time, for all of them
to end (agentx-harness 1.0.12 `aiperf/timing/branch_orchestrator.py` `_maybe_suspend_parent`,
`_arm_join_replay_deadline`: "replay time and child completion"). A turn with recorded
predecessors on other streams (`Session.after`) is held, when due, until they have ended,
then sent at once (`aiperf/timing/replay_dependencies.py` `ReplayBarrierCoordinator.submit`,
`complete`); a resumed tree counts every turn before a stream's resume point as ended
(`seed_completed_prefixes`). The tree is done when every stream is. Times are seconds of the
trace's clock on the driver's timeline (`now_s`).

`snapshot_at` places a tree at an instant t* of its recording, as the harness samples each
lane's start (`aiperf/timing/trajectory_source.py` `_build_timestamped_trajectory`,
`_snapshot_for`): the streams live at t*, each resuming at its first request at or after t*
(the one before it is the stream's warm-up request), at its offset from t*."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.workload.bounds import SessionPool, WorkloadBounds
from kvbench.workload.messages import ChatLayout, marker_blocks
from kvbench.workload.session import Session, Turn

ROOT = 0  # stream id of the root; branch i of `Session.tree()` is stream i + 1
# `TreeRun.marker_places` by session, stream and what the layout reads of its turns as sent,
# with the session (kept alive, so that its id names it): a corpus's sessions are replayed by
# both arms of every row a process simulates, and laying a stream out is per turn
_MARKERS: dict[tuple, tuple[Session, tuple[dict[int, int], list[int | None]]]] = {}
_MARKERS_MAX = 50_000


@dataclass(frozen=True, slots=True)
class Ready:
    """Send turn `k` (an index into `Session.turns`) of stream `stream` at `at_s`."""

    stream: int
    k: int
    at_s: float


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a tree picks up: each live stream's next position and when it is due (seconds
    after the resume), the branches already over."""

    streams: dict[int, tuple[int, float]]
    finished: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Warm:
    """A stream's last request before t* (sent with its history as warm-up); `lead_s` is how
    long before t* it was recorded."""

    stream: int
    k: int
    lead_s: float | None


@dataclass(slots=True)
class _Stream:
    turns: list[int]  # indexes into Session.turns, in order
    spawn: int | None = None  # root position whose end spawns it (None: the root itself)
    join: int | None = None  # root position that waits for it
    delay_s: float = 0.0
    pos: int = 0  # next position in `turns`
    state: str = "idle"  # idle | ready | inflight | blocked | done
    due_s: float = 0.0  # blocked root: when its own think time is over


@dataclass(slots=True)
class TreeRun:
    """One pass of a session tree. `shaped` turns a turn into the one sent (None: skipped);
    with `zero_delay` every think time and spawn offset is 0 (the harness's accelerated
    warm-up: "zero idle delay")."""

    session: Session
    shaped: Callable[[Turn], Turn | None]
    think: Callable[[Turn], float]
    zero_delay: bool = False
    # recorded offsets (a subagent's from its spawn, a resumed stream's) are scaled by this,
    # as think times are (the run's think_time_scale)
    delay_scale: float = 1.0
    streams: list[_Stream] = field(default_factory=list)
    turns: list[Turn | None] = field(default_factory=list)  # as sent (None: skipped)
    _stream_of: dict[int, int] = field(default_factory=dict)
    _spawns: dict[int, list[int]] = field(default_factory=dict)  # root pos -> streams
    _joins: dict[int, set[int]] = field(default_factory=dict)  # root pos -> live streams
    # the recorded happens-before between streams (`Session.after`): a turn due before the
    # turns it waits for ended is held until they have, then sent at once
    _ended: set[int] = field(default_factory=set)
    _held: dict[int, float] = field(default_factory=dict)  # turn -> when it was due

    def __post_init__(self) -> None:
        session = self.session
        self.turns = [self.shaped(t) for t in session.turns]
        kept = [k for k, t in enumerate(self.turns) if t is not None]
        self._ended = {k for k, t in enumerate(self.turns) if t is None}  # never waited for
        branches = session.tree()
        in_branch = {k for b in branches for k in range(b.first, b.end)}
        root = [k for k in kept if k not in in_branch]
        root_pos = {k: p for p, k in enumerate(root)}
        self.streams = [_Stream(root)]
        for b in branches:
            own = [k for k in kept if b.first <= k < b.end]
            # a skipped spawn or join turn: the nearest kept root turn before / after it
            spawn = max((p for k, p in root_pos.items() if k <= b.spawn), default=None)
            join = None if b.join is None else min(
                (p for k, p in root_pos.items() if k >= b.join), default=None)
            self.streams.append(_Stream(own, -1 if spawn is None else spawn, join,
                                        b.delay_s))
        for s, st in enumerate(self.streams):
            for k in st.turns:
                self._stream_of[k] = s
            if s and st.turns:
                self._spawns.setdefault(st.spawn, []).append(s)

    # -- the driver's calls ----------------------------------------------------------------
    @property
    def done(self) -> bool:
        return all(st.state == "done" or not st.turns for st in self.streams)

    def stream_of(self, k: int) -> int:
        return self._stream_of[k]

    def chat_layout(self, stream: int, key: object) -> tuple[ChatLayout, dict[int, int]]:
        """The stream's chat message layout over its turns as sent (workload/messages.py;
        `key` names it) and each turn's place in it; its declared prefix is its agent's
        (workload/weka.py `prompt_prefix_tokens`). The replay renders its prompts by it, the
        simulator places the tree's marker by it."""
        ks = self.streams[stream].turns
        agent = self.session.turns[ks[0]].agent if ks else None
        prefix = self.session.meta.get("prompt_prefix_tokens", {}).get(agent or "", 0)
        turns = [t for t in map(self.turns.__getitem__, ks) if t is not None]
        return ChatLayout(turns, prefix, key), {k: p for p, k in enumerate(ks)}

    def marker_places(self, stream: int) -> tuple[dict[int, int], list[int | None]]:
        """Each turn's place in the stream (`chat_layout`), and by place the block the tree's
        cache-bust marker precedes in that turn's messages (None: it carries none)."""
        ks = self.streams[stream].turns
        key = (id(self.session), stream, tuple(
            (t.input_tokens, t.output_tokens, t.block_tokens, t.recorded_output_tokens)
            for t in map(self.turns.__getitem__, ks) if t is not None))
        got = _MARKERS.get(key)
        if got is None:
            if len(_MARKERS) >= _MARKERS_MAX:
                _MARKERS.clear()
            layout, places = self.chat_layout(stream, None)
            got = _MARKERS[key] = (self.session, (places, marker_blocks(layout)))
        return got[1]

    def start(self, now_s: float) -> list[Ready]:
        """A fresh pass: the root's first turn now (and branches spawned before it, if any)."""
        out = self._spawn(-1, now_s)
        out += self._advance(ROOT, now_s, first=True)
        return self._gate(out)

    def resume(self, at: Resume, now_s: float) -> list[Ready]:
        """Pick up at `at`: every stream in it due at its offset after `now_s`; branches not
        in it and not finished are spawned when their root turn ends, as in a fresh pass."""
        out = []
        for s in at.finished:
            self.streams[s].state = "done"
            self._ended.update(self.streams[s].turns)
        if ROOT not in at.streams:  # the root ended before: its branches run on alone
            root = self.streams[ROOT]
            root.pos, root.state = len(root.turns), "done"
            self._ended.update(root.turns)
        for s, (pos, _) in sorted(at.streams.items()):
            st = self.streams[s]
            st.pos = pos
            self._ended.update(st.turns[:pos])  # the history before it (`seed_completed_prefixes`)
            if pos >= len(st.turns):
                st.state = "done"
                continue
            if s:
                self._register_join(s)
            st.state = "idle"
        for s, (pos, offset) in sorted(at.streams.items()):
            st = self.streams[s]
            if st.state == "done":
                continue
            offset = 0.0 if self.zero_delay else offset * self.delay_scale
            if s == ROOT and self._joins.get(pos):
                st.state, st.due_s = "blocked", now_s + offset
                continue
            st.state = "ready"
            out.append(Ready(s, st.turns[pos], now_s + offset))
        self._release_joins(now_s, out)
        return self._gate(out)

    def sent(self, k: int) -> None:
        self.streams[self._stream_of[k]].state = "inflight"

    def finished(self, k: int, now_s: float, stop: bool = False) -> list[Ready]:
        """Turn `k` ended at `now_s`; `stop` ends its stream there (a context overflow: every
        later turn of it is longer still)."""
        s = self._stream_of[k]
        st = self.streams[s]
        assert st.turns[st.pos] == k, (k, st.pos)  # a stream sends one turn at a time
        st.pos += 1
        self._ended.add(k)
        out: list[Ready] = []
        if s == ROOT:
            out += self._spawn(st.pos - 1, now_s)
        if stop:
            self._ended.update(st.turns[st.pos:])  # never sent: nothing waits for them
            st.pos = len(st.turns)
        out += self._advance(s, now_s)
        out = self._gate(out)
        for held, due_s in list(self._held.items()):
            if self._may_send(held):
                del self._held[held]
                out.append(Ready(self._stream_of[held], held, max(due_s, now_s)))
        return out

    def shift(self, by_s: float) -> None:
        """The driver moved the tree's pending timers `by_s` earlier (an idle cap): the due
        times it keeps of its own (a root blocked on a join, held turns) move with them."""
        root = self.streams[ROOT]
        if root.state == "blocked":
            root.due_s -= by_s
        for k in self._held:
            self._held[k] -= by_s

    def pending(self) -> list[tuple[int, int]]:
        """(stream, next turn) of every stream not done: what a handoff resumes."""
        return [(s, st.turns[st.pos]) for s, st in enumerate(self.streams)
                if st.state in ("ready", "blocked", "idle") and st.turns
                and st.pos < len(st.turns) and (s == ROOT or st.state != "idle")]

    def origin_s(self) -> float:
        """The tree's first recorded instant: a fresh pass's offsets count from it."""
        return min((self.session.turns[k].t_s for st in self.streams for k in st.turns),
                   default=0.0)

    def handoff(self, origin_s: float) -> Resume:
        """The tree's state as a `Resume`, each stream due at its next turn's recorded time
        after `origin_s` (the harness's handoff: `_handoff_replay_offset_ms`), or at its think
        time where the trace has no times."""
        timed = bool(self.session.meta.get("timed"))
        streams = {}
        for s, k in self.pending():
            turn = self.session.turns[k]
            offset = max(0.0, turn.t_s - origin_s) if timed else self.think(turn)
            streams[s] = (self.streams[s].pos, offset)
        finished = frozenset(s for s, st in enumerate(self.streams)
                             if s and st.state == "done")
        return Resume(streams, finished)

    # -- internals -------------------------------------------------------------------------
    def _may_send(self, k: int) -> bool:
        after = self.session.after
        return not after or all(p in self._ended for p in after.get(k, ()))

    def _gate(self, out: list[Ready]) -> list[Ready]:
        sendable = []
        for r in out:
            if self._may_send(r.k):
                sendable.append(r)
            else:
                self._held[r.k] = r.at_s
        return sendable

    def _delay(self, s: int, first: bool) -> float:
        st = self.streams[s]
        if self.zero_delay:
            return 0.0
        if first:
            return st.delay_s * self.delay_scale if s else 0.0
        return self.think(self.session.turns[st.turns[st.pos]])

    def _advance(self, s: int, now_s: float, first: bool = False) -> list[Ready]:
        st = self.streams[s]
        if st.pos >= len(st.turns):
            st.state = "done"
            out: list[Ready] = []
            if s:
                self._end_branch(s, now_s, out)
            return out
        due = now_s + self._delay(s, first)
        if s == ROOT and self._joins.get(st.pos):
            st.state, st.due_s = "blocked", due
            return []
        st.state = "ready"
        return [Ready(s, st.turns[st.pos], due)]

    def _spawn(self, root_pos: int, now_s: float) -> list[Ready]:
        out = []
        for s in self._spawns.get(root_pos, ()):
            if self.streams[s].state != "idle" or self.streams[s].pos:
                continue  # already live (a resumed tree)
            self._register_join(s)
            out += self._advance(s, now_s, first=True)
        return out

    def _register_join(self, s: int) -> None:
        join = self.streams[s].join
        if join is not None and join >= self.streams[ROOT].pos:
            self._joins.setdefault(join, set()).add(s)

    def _end_branch(self, s: int, now_s: float, out: list[Ready]) -> None:
        join = self.streams[s].join
        if join is not None and s in self._joins.get(join, ()):
            self._joins[join].discard(s)
            self._release_joins(now_s, out)

    def _release_joins(self, now_s: float, out: list[Ready]) -> None:
        root = self.streams[ROOT]
        if root.state == "blocked" and not self._joins.get(root.pos):
            root.state = "ready"
            out.append(Ready(ROOT, root.turns[root.pos], max(root.due_s, now_s)))


# -- t*: where a lane's first tree starts ----------------------------------------------------
def lane_seed(seed: int, trace_id: str, lane: int) -> int:
    """trajectory_source.py `_seed_for_trace_lane`: the per-(trace, lane) RNG seed."""
    digest = hashlib.sha256(f"{seed}:{trace_id}:{lane}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def sample_t_star_ms(bounds_ms: tuple[float, float], ratio: tuple[float, float],
                     seed: int) -> float:
    """`_build_timestamped_trajectory`: t* uniform in [start + lo * span, start + hi * span]
    by numpy's default generator, in milliseconds as the harness draws it."""
    import numpy as np

    start, end = bounds_ms
    lo = start + ratio[0] * (end - start)
    hi = max(lo, start + ratio[1] * (end - start))
    return float(lo if hi == lo else np.random.default_rng(seed).uniform(lo, hi))


def snapshot_at(run: TreeRun, t_star_s: float,
                lead_cap_s: float | None) -> tuple[Resume, list[Warm]] | None:
    """The tree at t*: the streams live then, each resuming at its first turn at or after
    t*, due at its offset from t*, and the warm-up request before it (its lead capped at
    `lead_cap_s`, `_capped_warmup_lead_ms`); None when nothing could be sent (the harness
    skips such a trace for the lane)."""
    turns = run.session.turns
    streams: dict[int, tuple[int, float]] = {}
    finished = set()
    warm: list[Warm] = []

    def next_at(st: _Stream) -> int | None:
        return next((p for p, k in enumerate(st.turns) if turns[k].t_s >= t_star_s), None)

    root = run.streams[ROOT]
    root_next = next_at(root)
    live_joins: set[int] = set()
    for s, st in enumerate(run.streams[1:], 1):
        if not st.turns:
            continue
        spawned = root_next is None or st.spawn < root_next
        if not spawned:
            continue  # its root turn is still ahead: spawned as in a fresh pass
        nxt = next_at(st)
        if nxt is None:
            finished.add(s)
            continue
        streams[s] = (nxt, max(0.0, turns[st.turns[nxt]].t_s - t_star_s))
        if st.join is not None and st.join == root_next:
            live_joins.add(s)
    if root_next is not None:
        streams[ROOT] = (root_next, max(0.0, turns[root.turns[root_next]].t_s - t_star_s))
    if not streams or all(s == ROOT and live_joins for s in streams):
        return None
    for s, (pos, _) in sorted(streams.items()):
        if pos >= 1:
            k = run.streams[s].turns[pos - 1]
            lead = t_star_s - turns[k].t_s
            if lead_cap_s is not None:
                lead = min(lead, lead_cap_s)
            warm.append(Warm(s, k, lead))
    return Resume(streams, frozenset(finished)), warm


def time_bounds_ms(run: TreeRun) -> tuple[float, float] | None:
    """`_trace_time_bounds`: the earliest and latest recorded request of the tree."""
    if not run.session.meta.get("timed"):
        return None
    ts = [run.session.turns[k].t_s * 1000.0 for st in run.streams for k in st.turns]
    return (min(ts), max(ts)) if ts else None


def turn_split(run: TreeRun, ratio: tuple[float, float], seed: int) -> int | None:
    """The harness's split for a trace without times (`_build_trajectory_for_lane`): warm-up
    at root turn k in [lo * n, hi * n] capped at n - 2, profiling from k + 1; None below two
    turns."""
    import numpy as np

    n = len(run.streams[ROOT].turns)
    if n <= 1:
        return None
    if n == 2:
        return 0
    k_min = min(int(ratio[0] * n), n - 2)
    k_max = max(k_min, min(int(ratio[1] * n), n - 2))
    return int(np.random.default_rng(seed).choice(list(range(k_min, k_max + 1))))


def first_start(run: TreeRun, ratio: tuple[float, float], seed: int, lane: int,
                lead_cap_s: float | None) -> tuple[Resume, list[Warm]] | None:
    """Where lane `lane`'s first tree starts, with its warm-up requests (module docstring)."""
    trace_seed = lane_seed(seed, run.session.session_id, lane)
    bounds = time_bounds_ms(run)
    if bounds is not None:
        return snapshot_at(run, sample_t_star_ms(bounds, ratio, trace_seed) / 1000.0,
                           lead_cap_s)
    k = turn_split(run, ratio, trace_seed)
    if k is None:
        return None
    root = run.streams[ROOT]
    return Resume({ROOT: (k + 1, 0.0)}), [Warm(ROOT, root.turns[k], None)]


@dataclass(slots=True)
class Placement:
    """A lane's first tree: its session and pass, its request order, where it picks up, its
    warm-up requests, and the recorded instant its offsets count from (t*)."""

    session: Session
    pass_no: int
    run: TreeRun
    resume: Resume
    warm: list[Warm]
    origin_s: float


def place_first(pool: SessionPool, bounds: WorkloadBounds, lane: int,
                lead_cap_s: float | None,
                make_run: Callable[[Session], TreeRun]) -> Placement | None:
    """Lane `lane`'s first tree from the pool: at t* with `start="sampled"`, else from its
    first turn; sessions that cannot be placed are passed over, as the harness skips them
    within its attempt budget (`_build_trajectories`)."""
    for _ in range(1 + 2 * max(1, len(pool.sessions))):
        got = pool.take()
        if got is None:
            return None
        run = make_run(got[0])
        if bounds.start != "sampled":
            return Placement(*got, run, Resume({ROOT: (0, 0.0)}), [], run.origin_s())
        placed = first_start(run, bounds.start_ratio, bounds.seed, lane, lead_cap_s)
        if placed is not None:
            resume, warm = placed
            return Placement(*got, run, resume, warm, _t_star(run, resume))
    return None


def _t_star(run: TreeRun, resume: Resume) -> float:
    """The instant a snapshot was taken at, from a live stream's offset."""
    for s, (pos, offset) in resume.streams.items():
        st = run.streams[s]
        if pos < len(st.turns):
            return run.session.turns[st.turns[pos]].t_s - offset
    return run.origin_s()


def phase_start(handoffs: list[tuple[TreeRun, Resume]]) -> list[Resume]:
    """Every lane's resume with the earliest pending offset of them all taken off, so the
    profiling phase's first request leaves at once and the rest keep their recorded spacing
    (`_profiling_phase_t0_offset_ms`: a root waiting on live subagents does not count; with
    a tree without recorded times there is no common clock and nothing is taken off)."""
    offsets = []
    untimed = False
    for run, resume in handoffs:
        untimed |= not run.session.meta.get("timed")
        for s, (pos, offset) in resume.streams.items():
            blocked = s == ROOT and any(run.streams[b].join == pos
                                        for b in resume.streams if b != ROOT)
            if not blocked:
                offsets.append(offset)
    t0 = 0.0 if untimed else min(offsets, default=0.0)
    return [Resume({s: (pos, max(0.0, offset - t0))
                    for s, (pos, offset) in resume.streams.items()}, resume.finished)
            for _, resume in handoffs]
