"""Closed-loop session lanes: concurrency is the number of live session trees. Each lane
replays a session tree (workload/tree.py: its root and its subagents, the subagents running
alongside their parent, so more requests can be in flight than there are lanes), then takes
the next session; sessions are recycled while a bound (duration or request count) remains,
each pass in a fresh hash namespace so a recycled session cannot hit the cache its previous
pass filled. A lane holds its slot until its whole tree is done (agentx-harness 1.0.12
aiperf/timing/strategies/agentic_replay.py: "a lane recycles only once its entire tree
drains")."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter_ns

from kvbench.errors import ReplayOptionError
from kvbench.redaction import redact_text, remember_secret
from kvbench.replay import idle
from kvbench.replay.config import ReplayConfig
from kvbench.replay.digest import Digest
from kvbench.replay.http import (
    KEEPALIVE_ONLY_S,
    STALLED,
    Connection,
    Endpoint,
    Response,
    open_connection,
)
from kvbench.replay.ideal import IdealCache
from kvbench.replay.lockstep import After, arrival_ns, ended, resolve_request, successors
from kvbench.replay.overflow import is_context_overflow
from kvbench.replay.pacing import RENDER_PASS_BLOCKS, PassBudget
from kvbench.replay.profile import chat_prompts
from kvbench.replay.request import RequestFactory, build_record, mark_impossible_usage
from kvbench.workload.bounds import SessionPool, pass_key, pass_namespace
from kvbench.workload.messages import ChatLayout
from kvbench.workload.prompt import PromptBuilder, PromptJson, PromptStream, tree_marker
from kvbench.workload.session import Session, Turn
from kvbench.workload.tree import Ready, TreeRun

RECONNECT_BACKOFF_S = 0.5
WARM_SLICE_BLOCKS = 32
RELEASE_SLICE_BLOCKS = 1024
# how long before a turn is due its lane opens a fresh connection, when the one it holds will
# be stale by then (`Lanes._connect_ahead`): well above a loopback connect's 13 ms p99 at 512
# busy lanes, well below any server's idle timeout (uvicorn's 5 s, the shortest we know)
CONNECT_AHEAD_S = 0.25
# agentic_replay.py `_WARMUP_MAX_TOKENS`: every warm-up request asks for one output token
WARMUP_MAX_TOKENS = 1
# The server is gone when nothing answered for `server_gone_s` (wall time, default 10 s) and
# at least this many requests in a row, across lanes, found no server: connections refused or
# reset before a response byte. The run then stops instead of recording refusals for the rest
# of its duration.
SERVER_GONE_FAILURES = 3


RETRY_AFTER_CAP_S = 60.0


def retry_after_s(status: int, headers: dict[str, str]) -> float:
    """Seconds a 429/503 response's Retry-After asks for (delta-seconds or an HTTP date,
    RFC 9110 §10.2.3), capped; 0 when there is none."""
    if status not in (429, 503):
        return 0.0
    value = headers.get("retry-after", "").strip()
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return 0.0
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S) if math.isfinite(seconds) else 0.0


# descriptors a replay needs besides its lanes' sockets (records, logs, the loop, scrapes)
SPARE_FDS = 64


def check_sockets(concurrency: int) -> None:
    """Each lane holds one connection: raise this process's open-file limit (soft, up to the
    hard limit) to what `concurrency` lanes need, or refuse the run before it starts, rather
    than have lanes fail with EMFILE mid-run."""
    import resource

    need = concurrency + SPARE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise ReplayOptionError(
        f"--concurrency {concurrency} needs {need} open files (a socket per lane), above "
        f"this process's hard limit of {hard} (ulimit -Hn)",
        hint="lower --concurrency, or raise the limit (ulimit -n, /etc/security/limits.conf)")


@dataclass(slots=True)
class Counters:
    sent: int = 0
    profiled_sent: int = 0
    done: int = 0
    errors: int = 0
    out_tokens: int = 0
    in_tokens: int = 0
    inflight: int = 0
    max_inflight: int = 0  # the most requests in flight at once (profiled or not)
    max_inflight_profiled: int = 0  # ... counted at the send of a profiled request
    connections_opened: int = 0
    resent_unanswered: int = 0  # reused connection closed by the server before answering
    reopened_idle: int = 0  # reused connection idle past the server's keep-alive
    arrivals_delayed: int = 0  # open loop: session arrivals that waited for the live cap
    notes: list[str] = field(default_factory=list)
    # requests in a row that found no server, and when the first of them did
    unreachable: int = 0
    unreachable_since_ns: int = 0
    # requests in a row whose stream sent keep-alives and no event (replay/http.py)
    stalled: int = 0

    def connections(self) -> dict[str, int]:
        return {"opened": self.connections_opened, "resent_unanswered": self.resent_unanswered,
                "reopened_idle": self.reopened_idle}


@dataclass(slots=True)
class Tree:
    """One pass of a session tree on a lane: its request order (`run`), its idle scope, the
    tasks sending its streams' turns, and each stream's rendered context (handed on to the
    tree that continues the same pass: warm-up to profiling)."""

    lane: int
    session: Session
    pass_no: int
    run: TreeRun
    cap: idle.IdleCap | None
    warm: bool = False  # its requests are warm-up: one output token each
    tasks: set[asyncio.Task] = field(default_factory=set)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    # each stream's next turn, rendered while the stream's request is in flight
    ahead: dict[int, asyncio.Task] = field(default_factory=dict)
    prompts: dict[int, PromptStream] = field(default_factory=dict)
    # each stream's chat message layout and its turns' places in it (a profile's
    # `chat_segments`), made when the stream's first prompt is
    chats: dict[int, tuple[ChatLayout, dict[int, int]]] = field(default_factory=dict)
    # a virtual clock: the tree's last request and its end, which the lane's next follows
    last: tuple[str, float] | None = None
    # the tree's cache-bust marker (a profile's `tree_marker`): then the marker alone keeps a
    # pass's prompts apart from another's, and every pass renders the trace's own blocks, so
    # the prefix before it (the system message) is shared as the harness shares it
    bust: str | None = None

    def prompt(self, stream: int) -> PromptStream:
        got = self.prompts.get(stream)
        if got is None:
            got = self.prompts[stream] = PromptStream()
        return got

    @property
    def key(self) -> str:
        return pass_key(self.session, self.pass_no)

    @property
    def namespace(self) -> str:
        return pass_namespace(self.session, self.pass_no, self.bust is not None)


class Lanes:
    def __init__(self, cfg: ReplayConfig, ep: Endpoint, pool: SessionPool, prompts: PromptBuilder,
                 write: Callable[[dict], None], counters: Counters,
                 shard: tuple[int, int] = (0, 1)) -> None:
        self.cfg = cfg
        if cfg.api_key:
            remember_secret(cfg.api_key)  # in every worker process that sends it
        self.ep = ep
        self.pool = pool
        self.prompts = prompts
        self.write = write
        self.write_error: OSError | None = None  # the records could not be written (disk full)
        self.c = counters
        self.factory = RequestFactory(cfg, ep)
        # the profile's chat prompts: the harness's role segments (workload/messages.py) and
        # its cache-bust marker per session tree in the first user message
        self.chat_segments = chat_prompts(cfg.profile, self.factory.chat)[0]
        self.tree_markers = cfg.bounds.tree_markers  # chat_prompts' too
        # a virtual-clock server (replay/lockstep.py): its stamps are the times recorded, and
        # each request says what it follows
        self.virtual = cfg.virtual_lanes is not None
        self.digest = Digest(chat=self.factory.chat, keep_text=cfg.keep_text,
                             server_clock=self.virtual)
        self.virtual_start_s = (cfg.virtual_start_ns or 0) / 1e9
        self.virtual_deadline_s = (self.virtual_start_s + cfg.duration_s
                                   if self.virtual and cfg.duration_s is not None else None)
        self._follows: dict[tuple[str, int], str] = {}  # request -> its succession headers
        self._answers: dict[tuple[str, int], tuple[str, float] | None] = {}
        self.bounds = cfg.bounds
        self.ideal = IdealCache()  # the ceiling any cache could reach on what this run sends
        self.deadline_ns: int | None = None
        self.stopping = False
        # set when the run must end before its bound (stop_reason says why)
        self.halted = asyncio.Event()
        self.stop_reason: str | None = None
        self.closed = False  # the records file is closed: nothing more is written
        # request ids `lane-seq` stay unique across the worker processes of one run
        # (replay/workers.py): shard i of n numbers its requests i+n, i+2n, ...
        self._seq, self._seq_step = shard
        self.lane_offset = 0  # this shard's first lane (and open-loop session) number
        # closed loop only: an open loop's arrivals are its own clock, not think times. With
        # --workers each shard caps its own lanes' idleness (replay/idle.py); a shift moves
        # every live tree's own timers too (the harness's `cap_pending_delay` moves every
        # pending timer of its scheduler, a blocked join's included)
        self.idle = (idle.IdleCap(cfg.system_idle_cap_s / (cfg.time_scale or 1.0),
                                  self._shift_trees)
                     if cfg.system_idle_cap_s is not None and cfg.session_rate is None
                     else None)
        self.live_trees: dict[int, Tree] = {}  # the trees being driven, by id
        self.t0_ns = perf_counter_ns()  # the trees' clock: trace seconds since then
        self.warming = False  # the warm-up phase: idle caps off, one-token requests
        self.quota: dict[int, int] = {}  # warm-up requests each lane may still send
        # each lane's first tree and sends: prepared, or after the warm-up
        self.first_trees: dict[int, tuple[Tree, list[Ready]]] = {}
        self.failed_warmup: list[str] = []  # root requests of the warm-up that failed
        self._conns: dict[int, list[Connection]] = {}  # each lane's idle connections
        # each lane's connection to be opened, or being opened, ahead of its next turn
        # (`_connect_ahead`)
        self._ahead: dict[int, asyncio.TimerHandle] = {}
        self._opening: dict[int, asyncio.Task] = {}
        self.tree_shifts = 0  # shifts of the trees' idle caps, in all
        self.tree_shifted_ns = 0
        self.stream_tasks: set[asyncio.Task] = set()  # every tree's, to cancel at the end
        # prompt blocks rendered per loop pass, a slice at a time (replay/pacing.py), so
        # that every lane's new context at once (the run's start, the warm-up, 512 streams'
        # next turns) never makes one long loop iteration
        self.renders = PassBudget(RENDER_PASS_BLOCKS)
        # request bytes written per loop pass (replay/pacing.py)
        self.sends = PassBudget()
        # the preparation before the clock starts: each lane's first prompts rendered
        self.prepared_s = 0.0
        self.prepared_tokens = 0
        self.error: BaseException | None = None  # a stream task's own failure
        # the profiling phase on the records' clock: after the warm-up, for the duration
        self.profiling_started_ns: int | None = None
        self.profiling_ended_ns: int | None = None

    def now_s(self) -> float:
        """The trees' clock: the server's seconds since the run began."""
        return (perf_counter_ns() - self.t0_ns) / 1e9 * self.cfg.time_scale

    def at_ns(self, at_s: float) -> int:
        return self.t0_ns + int(at_s / self.cfg.time_scale * 1e9)

    def _answered(self, resp: Response | None) -> None:
        """Count requests that found no server (connect refused, closed before any byte);
        any answer, even an HTTP error, means the server is there."""
        c = self.c
        if resp is not None and resp.status:
            c.unreachable = 0
            return
        now = perf_counter_ns()
        if not c.unreachable:
            c.unreachable_since_ns = now
        c.unreachable += 1
        silent_s = (now - c.unreachable_since_ns) / 1e9
        if c.unreachable >= SERVER_GONE_FAILURES and silent_s >= self.cfg.server_gone_s:
            self.halt(f"the server stopped answering: {c.unreachable} requests in a row found "
                      f"no server over {silent_s:.1f} s")

    def halt(self, reason: str) -> None:
        """End the run now (in-flight requests are cut off and recorded as cancelled)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopping = True
        self.halted.set()

    def _may_send(self, warm: bool) -> bool:
        if self.stopping:
            return False
        if self.deadline_ns is not None and perf_counter_ns() >= self.deadline_ns:
            self.stopping = True
            return False
        if not warm and self.bounds.request_cap_reached(self.c.profiled_sent):
            self.stopping = True
            return False
        return True

    # -- trees -----------------------------------------------------------------------------
    def _shift_trees(self, shift_ns: int) -> None:
        for tree in self.live_trees.values():
            tree.run.shift(shift_ns / 1e9 * (self.cfg.time_scale or 1.0))

    def make_run(self, session: Session, zero_delay: bool = False) -> TreeRun:
        return TreeRun(session, self.bounds.shaped, self.bounds.think_s, zero_delay=zero_delay,
                       delay_scale=self.bounds.think_time_scale)

    def new_tree(self, lane: int, session: Session, pass_no: int, *,
                 zero_delay: bool = False, run: TreeRun | None = None,
                 prompts: dict[int, PromptStream] | None = None) -> Tree:
        """A tree pass; `prompts` are the streams' contexts of the tree it continues (the
        same pass)."""
        run = run or self.make_run(session, zero_delay)
        scale = self.cfg.time_scale
        # a root blocked on its subagents, a turn held for another stream: moved with the
        # tree's timers
        cap = (idle.IdleCap(self.cfg.tree_idle_cap_s / scale,
                            lambda ns: run.shift(ns / 1e9 * scale))
               if self.cfg.tree_idle_cap_s is not None else None)
        bust = (tree_marker(self.prompts.run_id, pass_no, lane, session.session_id)
                if self.tree_markers else None)
        return Tree(lane, session, pass_no, run, cap, warm=zero_delay,
                    prompts=prompts if prompts is not None else {}, bust=bust)

    def next_tree(self, lane: int, *, zero_delay: bool = False, now_s: float | None = None
                  ) -> tuple[Tree, list[Ready]] | None:
        """The lane's next session from the pool, from its first turn (at `now_s` of the
        trees' clock, default now)."""
        if self.stopping or (got := self.pool.take()) is None:
            return None
        tree = self.new_tree(lane, *got, zero_delay=zero_delay)
        return tree, tree.run.start(self.now_s() if now_s is None else now_s)

    async def prepare(self, lane_ids: list[int]) -> None:
        """Before the run's clock starts: take each lane's first session and render the
        prompts of its first turns, so the schedule begins with every lane ready to send.
        Otherwise every lane's first context (512 AgentX-sized ones: 78.6M tokens) is
        rendered after the clock started, seconds in which the turns that follow are late
        for a reason no agent has. The trees start at 0 of the trees' clock: the caller sets
        `t0_ns` when the clock starts. Counted in `prepared_s` and `prepared_tokens`."""
        t0 = perf_counter_ns()
        for lane in lane_ids:
            got = self.next_tree(lane, now_s=0.0)
            if got is None:
                break
            self.first_trees[lane] = got
            tree, ready = got
            for r in ready:
                turn = tree.run.turns[r.k]
                if turn is not None:
                    await self._warm(tree.prompt(r.stream), turn, tree.namespace)
                    self.prepared_tokens += turn.input_tokens
        self.prepared_s = (perf_counter_ns() - t0) / 1e9

    async def drive(self, tree: Tree, ready: list[Ready],
                    after: list[After] | None = None) -> None:
        """Send the tree's turns as they become due, until it is done or nothing more may be
        sent (the run's end, the warm-up's quota: its pending turns are left as they are).
        `after`: a virtual clock's, what each first request follows."""
        tree.drained.clear()
        self.live_trees[id(tree)] = tree
        self._schedule(tree, ready, first=True, after=after)
        try:
            if tree.tasks:
                await tree.drained.wait()
        except asyncio.CancelledError:
            for t in tree.tasks:  # the lane is cancelled: its streams with it
                t.cancel()
            raise
        finally:
            self.live_trees.pop(id(tree), None)
            for t in tree.ahead.values():  # renderings no turn will wait for
                t.cancel()
            tree.ahead.clear()
        if tree.cap is not None:
            self.tree_shifts += tree.cap.shifts
            self.tree_shifted_ns += tree.cap.shift_ns
            tree.cap.shifts = 0
            tree.cap.shift_ns = 0

    def _schedule(self, tree: Tree, ready: list[Ready], first: bool = False,
                  after: list[After] | None = None) -> None:
        now = self.now_s()
        for i, r in enumerate(ready):
            # a tree's own first request has no schedule to be late against
            timed = not (first and r.at_s <= now)
            task = asyncio.create_task(
                self._stream_turn(tree, r, timed) if after is None
                else self._stream_turn_virtual(tree, r, after[i]))
            tree.tasks.add(task)
            self.stream_tasks.add(task)
            task.add_done_callback(lambda t, tree=tree: self._task_done(tree, t))
            if tree.cap is not None:
                idle.enter([tree.cap])
            if self.idle is not None:
                idle.enter([self.idle])

    def _task_done(self, tree: Tree, task: asyncio.Task) -> None:
        tree.tasks.discard(task)
        self.stream_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.error is None:
            # a bug, not a request's failure (those are records): the run ends with it
            self.error = task.exception()
            self.halt(f"a session stream failed: {self.error!r}")
        if tree.cap is not None:
            idle.leave([tree.cap])
        if self.idle is not None:
            idle.leave([self.idle])
        if not tree.tasks:
            tree.drained.set()

    def _caps(self, tree: Tree) -> list[idle.IdleCap]:
        if self.warming:
            return []  # warm-up requests go back to back: no idle to cap
        return [c for c in (self.idle, tree.cap) if c is not None]

    async def _stream_turn(self, tree: Tree, r: Ready, timed: bool) -> None:
        turn = tree.run.turns[r.k]
        assert turn is not None  # the tree holds kept turns only
        namespace = tree.namespace
        target = self.at_ns(r.at_s)
        if (ahead := tree.ahead.pop(r.stream, None)) is not None:
            await ahead
        if perf_counter_ns() < target:
            # rendered while the agent "thinks": lateness is then the client failing the
            # schedule, not text synthesis the schedule leaves time for
            await self._warm(tree.prompt(r.stream), turn, namespace, target)
            self._connect_ahead(tree.lane, target)
            caps = self._caps(tree)
            if caps:
                target = await idle.sleep_until(caps, target, self.deadline_ns)
            else:
                wait = (target - perf_counter_ns()) / 1e9
                if self.deadline_ns is not None:
                    wait = min(wait, (self.deadline_ns - perf_counter_ns()) / 1e9)
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.deadline_ns is not None and target >= self.deadline_ns:
                # due after the run's end (the loop may wake a timer a clock tick early)
                self.stopping = True
                return
        prompt = await self._prompt(tree, r, turn, target if timed else None)
        is_warmup = tree.warm or self.bounds.is_warmup(False, self.c.sent)
        if not self._may_send(is_warmup):
            return
        if tree.warm:
            left = self.quota.get(tree.lane)
            if left is not None:
                if left <= 0:
                    return  # the lane's warm-up is spent: the turn waits for the handoff
                self.quota[tree.lane] = left - 1
        tree.run.sent(r.k)
        if (ahead := self._prefetch(tree, r)) is not None:
            tree.ahead[r.stream] = ahead
        ok, overflow, end_ns = await self._send(tree, r, turn, prompt,
                                                target if timed else None, is_warmup)
        if tree.warm and not ok and r.stream == 0:
            # the harness aborts on a terminal warm-up failure of a root conversation, at once
            # (agentic_replay.py `report_warmup_failures`)
            self.failed_warmup.append(tree.key)
            self.halt(f"warm-up failed: a request of {tree.key} (turn {r.k}) failed")
        stop = overflow and self.cfg.end_session_on_context_overflow
        # the next turns are due after the response's last byte arrived, not after this task
        # got the loop back: a loop running late must show as lateness, not move the schedule
        end_s = (end_ns - self.t0_ns) / 1e9 * self.cfg.time_scale
        self._schedule(tree, tree.run.finished(r.k, end_s, stop=stop))

    async def _stream_turn_virtual(self, tree: Tree, r: Ready, after: After) -> None:
        """A turn against a virtual-clock server: sent at once, naming what it follows and its
        delay (the server waits for it; no sleeping here); one not sent is resolved, and its
        end hands its successors on, or the tree's end to the lane (replay/lockstep.py)."""
        turn = tree.run.turns[r.k]
        assert turn is not None
        if (ahead := tree.ahead.pop(r.stream, None)) is not None:
            await ahead
        prompt = await self._prompt(tree, r, turn)
        is_warmup = tree.warm or self.bounds.is_warmup(False, self.c.sent)
        past = self.virtual_deadline_s is not None and r.at_s >= self.virtual_deadline_s
        if past or not self._may_send(is_warmup):
            await self._resolve(tree.lane, after.rid, after.count, 1)
            return
        tree.run.sent(r.k)
        if (ahead := self._prefetch(tree, r)) is not None:
            tree.ahead[r.stream] = ahead
        key = (tree.key, r.k)
        self._follows[key] = after.headers(r.at_s)
        _, overflow, _ = await self._send(tree, r, turn, prompt, None, is_warmup)
        answer = self._answers.pop(key, None)
        if answer is None:  # nothing answered: the clock cannot be told what follows
            self.halt(f"the virtual-clock server did not answer a request of {tree.key} "
                      f"(turn {r.k}) with its id and end")
            return
        rid, end_s = answer
        stop = overflow and self.cfg.end_session_on_context_overflow
        ready = tree.run.finished(r.k, end_s, stop=stop)
        if ready:
            self._schedule(tree, ready, after=successors(rid, end_s, len(ready)))
        elif len(tree.tasks) <= 1:  # the tree's last request: its lane says what follows
            tree.last = (rid, end_s)
        else:
            await self._resolve(tree.lane, rid, 0, 0)

    async def _resolve(self, lane: int, after: str, count: int, skipped: int) -> None:
        """Tell a virtual-clock server that `skipped` of `after`'s `count` successors will
        not come (0 of 0: none follows it)."""
        conns = self._conns.setdefault(lane, [])
        conn = conns.pop() if conns else None
        raw = resolve_request(self.ep.host_header, self.ep.base_path, after, count, skipped)
        try:
            conn = await self._connection(conn)
            _, resp = await asyncio.wait_for(conn.request((raw,)), self.cfg.request_timeout_s)
        except (ConnectionError, TimeoutError, OSError) as e:
            self.halt(f"the virtual-clock server stopped answering: {e}")
            return
        if resp.status != 200:
            self.halt(f"the virtual-clock server refused to resolve {after}: HTTP "
                      f"{resp.status} {resp.body()[:300].decode('utf-8', 'replace')}")
        if resp.complete and resp.status == 200:
            conns.append(conn)
        else:
            conn.close()

    def _prefetch(self, tree: Tree, r: Ready) -> asyncio.Task | None:
        """Render the stream's next turn while this one is in flight: with no think time
        (the quickstart's) a 68K-token context took 29 ms to render between the previous
        turn's end and the send, which the send lateness check counted against the client.
        Started once this turn's prompt is built: a stream renders one turn at a time (two
        turns that share no prefix, across a compaction, would undo each other's blocks)."""
        st = tree.run.streams[r.stream]
        nxt = st.pos + 1
        if nxt >= len(st.turns):
            return None
        turn = tree.run.turns[st.turns[nxt]]
        if turn is None:
            return None
        return asyncio.create_task(self._warm(tree.prompt(r.stream), turn, tree.namespace))

    async def _prompt(self, tree: Tree, r: Ready, turn: Turn,
                      due_ns: int | None = None) -> PromptJson:
        """The turn's prompt; the blocks it adds are rendered now where no think time or
        earlier turn in flight left time for them (a session's first turn, the warm-up's);
        `due_ns`: when the turn is due."""
        stream = tree.prompt(r.stream)
        await self._warm(stream, turn, tree.namespace, due_ns)
        chat, pos = self._chat(tree, r) if self.chat_segments else (None, 0)
        return self.prompts.json(turn, tree.namespace, (tree.key, r.k), stream, chat, pos,
                                 tree.bust)

    @staticmethod
    def _chat(tree: Tree, r: Ready) -> tuple[ChatLayout, int]:
        """The stream's message layout (workload/tree.py `chat_layout`), and the turn's place
        in it."""
        got = tree.chats.get(r.stream)
        if got is None:
            got = tree.chats[r.stream] = tree.run.chat_layout(r.stream, (tree.key, r.stream))
        return got[0], got[1][r.k]

    async def _send(self, tree: Tree, r: Ready, turn: Turn, prompt: PromptJson,
                    target: int | None, is_warmup: bool,
                    max_tokens: int | None = None) -> tuple[bool, bool, int]:
        """One request on a connection of the lane's; (answered in full, context overflow,
        when it ended: its last byte's arrival, or when the lane could go on)."""
        if (timer := self._ahead.get(tree.lane)) is not None:
            # due before its connect-ahead ran (a render or the loop ran late): open it now,
            # the same way, rather than let the send open one of its own
            timer.cancel()
            self._open_ahead(tree.lane, perf_counter_ns())
        if (opening := self._opening.get(tree.lane)) is not None:
            await asyncio.wait((opening,))  # the connection opened for this turn
        conns = self._conns.setdefault(tree.lane, [])
        conn = conns.pop() if conns else None
        if tree.warm:
            max_tokens = WARMUP_MAX_TOKENS
        ready_ns = tree.prompt(r.stream).rendered_ns or None
        conn, ok, overflow, end_ns = await self._one(tree.lane, tree.key, r.k, turn,
                                                     tree.namespace, target, is_warmup, conn,
                                                     prompt, max_tokens, ready_ns)
        if conn is not None:
            conns.append(conn)
        return ok, overflow, end_ns

    def _connect_ahead(self, lane: int, due_ns: int) -> None:
        """Open the lane's next connection `CONNECT_AHEAD_S` before its turn is due when the
        connection it holds will have sat idle past keep-alive by then (`Connection.stale`):
        the connect (13 ms p99 at 512 AgentX lanes, a fifth of the turns) is then not counted
        against the send, which would otherwise open it when due."""
        conns = self._conns.get(lane)
        if lane in self._ahead or lane in self._opening or (
                conns and not conns[-1].closed and not conns[-1].stale(due_ns)):
            return
        delay_s = (due_ns - perf_counter_ns()) / 1e9 - CONNECT_AHEAD_S
        self._ahead[lane] = asyncio.get_running_loop().call_later(
            max(0.0, delay_s), self._open_ahead, lane, due_ns)

    def _open_ahead(self, lane: int, due_ns: int) -> None:
        self._ahead.pop(lane, None)
        if self.stopping or lane in self._opening:
            return
        task = asyncio.create_task(self._open(lane, due_ns))
        self._opening[lane] = task
        self.stream_tasks.add(task)  # cancelled with the streams at the run's end
        task.add_done_callback(self.stream_tasks.discard)
        task.add_done_callback(lambda t: self._opening.pop(lane, None)
                               if self._opening.get(lane) is t else None)

    async def _open(self, lane: int, due_ns: int) -> None:
        """Replace the lane's connection that is stale by its turn's due time with a fresh
        one (its sends wait for this); a failure is left to the send, which opens its own
        and records what fails."""
        conns = self._conns.setdefault(lane, [])
        if conns and not conns[-1].closed and not conns[-1].stale(due_ns):
            return
        try:
            conn = await open_connection(self.ep)
        except ConnectionError:
            return
        self.c.connections_opened += 1
        if self.stopping or self._conns.get(lane) is not conns:  # the lane closed meanwhile
            conn.close()
            return
        for old in conns:  # each stale by now (the newest is)
            if not old.closed:
                self.c.reopened_idle += 1
            old.close()
        conns[:] = [conn]

    def close_lane(self, lane: int) -> None:
        if (timer := self._ahead.pop(lane, None)) is not None:
            timer.cancel()
        if (opening := self._opening.pop(lane, None)) is not None:
            opening.cancel()
        for conn in self._conns.pop(lane, []):
            conn.close()

    async def run_lane(self, lane: int) -> None:
        if self.virtual:
            return await self._run_lane_virtual(lane)
        try:
            got = self.first_trees.pop(lane, None)
            while True:
                if got is None:
                    got = self.next_tree(lane)
                if got is None:
                    break
                await self.drive(*got)
                tree, got = got[0], None
                await self._release(tree)
                if self.stopping:
                    break
        finally:
            self.close_lane(lane)

    async def _run_lane_virtual(self, lane: int) -> None:
        """A lane against a virtual-clock server: its first tree follows the lane's start,
        each next one the previous tree's last request; the lane's end resolves it."""
        after, at_s = f"lane-{lane}", self.virtual_start_s
        try:
            while True:
                got = self.next_tree(lane, now_s=at_s)
                if got is None or not got[1]:
                    await self._resolve(lane, after, 0, 0)
                    break
                tree, ready = got
                await self.drive(tree, ready, successors(after, at_s, len(ready)))
                if tree.last is None:  # it ended on a turn not sent: resolved already
                    break
                after, at_s = tree.last
        finally:
            self.close_lane(lane)

    async def run_open(self, rate_per_s: float, poisson: bool, seed: int) -> None:
        """Open loop: sessions arrive at `rate_per_s` (of the server's clock; Poisson or evenly
        spaced), each replayed as a lane would, whatever the server's progress;
        `concurrency` caps the live sessions: an arrival beyond it waits for one to end and is
        counted in `arrivals_delayed` (a session's first turn has no target to be late to)."""
        rng = random.Random(seed)
        interval_s = 1.0 / (rate_per_s * self.cfg.time_scale)
        cap = asyncio.Semaphore(self.cfg.concurrency)
        live: set[asyncio.Task] = set()
        next_ns, sid = perf_counter_ns(), self.lane_offset
        try:
            while True:
                next_ns += int((rng.expovariate(1 / interval_s) if poisson else interval_s)
                               * 1e9)
                wait = (next_ns - perf_counter_ns()) / 1e9
                if self.deadline_ns is not None:
                    wait = min(wait, (self.deadline_ns - perf_counter_ns()) / 1e9)
                if wait > 0:
                    await asyncio.sleep(wait)
                if not self._may_send(False):
                    break
                if cap.locked():
                    self.c.arrivals_delayed += 1
                await cap.acquire()
                got = self.next_tree(sid)
                if got is None:
                    cap.release()
                    break
                task = asyncio.create_task(self._open_session(sid, got, cap))
                live.add(task)
                task.add_done_callback(live.discard)
                sid += 1
            while live:
                await asyncio.wait(set(live))
        finally:
            while live:  # cancelled: the sessions too, again past wait_for's dropped cancels
                for t in live:
                    t.cancel()
                await asyncio.wait(set(live), timeout=0.2)

    async def _open_session(self, sid: int, got: tuple[Tree, list[Ready]],
                            cap: asyncio.Semaphore) -> None:
        try:
            await self.drive(*got)
            await self._release(got[0])
        finally:
            cap.release()
            self.close_lane(sid)

    @staticmethod
    async def _release(tree: Tree) -> None:
        """Free a finished tree's contexts a slice per loop pass: a 12K-block context freed
        at once was one pass of tens of milliseconds (its blocks are the stream's own,
        scattered over the heap)."""
        for stream in tree.prompts.values():
            while stream.blocks:
                stream.truncate(stream.blocks - RELEASE_SLICE_BLOCKS)
                if stream.blocks:
                    await asyncio.sleep(0)
        tree.prompts.clear()

    async def _warm(self, stream: PromptStream, turn: Turn, namespace: str,
                    due_ns: int | None = None) -> None:
        """Render the blocks the turn adds to its stream's context in slices, each admitted
        by the render budget (replay/pacing.py) in the order of `due_ns` (when the turn is
        due; None: no schedule, after those that have one): a new 100K-token context, or 512
        streams' next turns at once, must not stall the loop that timestamps every other
        lane's bytes."""
        prompts = self.prompts
        left = prompts.sync(stream, turn, namespace, 0)
        if not left:
            stream.rendered_ns = stream.rendered_ns or perf_counter_ns()
            return
        while left:
            await self.renders.admit(min(left, WARM_SLICE_BLOCKS), due_ns)
            left = prompts.sync(stream, turn, namespace, WARM_SLICE_BLOCKS)
        stream.rendered_ns = perf_counter_ns()  # the send's `t_ready_ns`

    async def _one(self, lane: int, key: str, k: int, turn: Turn, namespace: str,
                   target: int | None, is_warmup: bool, conn: Connection | None,
                   prompt: PromptJson, max_tokens: int | None = None,
                   ready_ns: int | None = None) -> tuple[Connection | None, bool, bool, int]:
        """Send one request and hand its response to the digest; (the connection to reuse,
        answered in full, a context overflow, when it ended). `ready_ns`: when its prompt
        was rendered."""
        cfg = self.cfg
        # a virtual clock's succession headers (replay/lockstep.py)
        extra = self._follows.pop((key, k), "") if self.virtual else ""
        self._seq += self._seq_step
        self.c.sent += 1
        if not is_warmup:
            self.c.profiled_sent += 1
        max_tokens = max_tokens or self.bounds.max_tokens(turn)
        self.c.inflight += 1
        inflight = self.c.inflight
        self.c.max_inflight = max(self.c.max_inflight, inflight)
        if not is_warmup:
            self.c.max_inflight_profiled = max(self.c.max_inflight_profiled, inflight)
        # t_ready_ns: when the prompt's blocks were rendered (`ready_ns`); lateness before it
        # is rendering the schedule left no time for, after it the loop's own (a timer woken
        # late, the connection, the byte budget)
        base = {"request_id": f"{lane}-{self._seq}", "session_id": key, "turn": k, "lane": lane,
                "agent": turn.agent, "is_warmup": is_warmup, "t_target_ns": target,
                "t_ready_ns": None if self.virtual else ready_ns,
                "sent_prompt_tokens": prompt.num_tokens, "max_tokens": max_tokens,
                "inflight": inflight,
                "ideal_cached_tokens": self.ideal.observe(turn, namespace, prompt.marker,
                                                          prompt.marker_at_block,
                                                          prompt.marker_tokens)}
        if prompt.marker is not None:
            base["cache_bust_marker"] = prompt.marker
        body = self.factory.body(max_tokens)
        prompt_bytes = prompt.num_bytes
        t_send, err = perf_counter_ns(), None
        resp: Response | None = None
        try:
            resent = refitted = False
            while True:
                conn = await self._connection(conn)
                reused = conn.served > 0
                await self.sends.admit(prompt_bytes, target)
                # in this task (not wait_for's own, which starts a pass later): the body is
                # written in the pass the budget counted it in
                async with asyncio.timeout(cfg.request_timeout_s):
                    t_send, resp = await conn.request(
                        self.factory.encode(body, key, prompt, extra))
                if resp.unanswered and reused and not resent:
                    # the server closed its idle end as we wrote: it never read the request
                    resent = True
                    self.c.resent_unanswered += 1
                    continue
                rejected = self.factory.rejected_fields(resp, body)
                if not rejected or refitted:
                    break
                refitted = True
                self.factory.dropped.update(rejected)
                self.c.notes.append(f"server rejected {', '.join(rejected)}: sent without it")
                body = self.factory.body(max_tokens)
        except ConnectionError as e:
            resp = None
            rec, err = build_record(None, chat=True, keep_text=False, error=str(e),
                                    error_kind="connect"), e
            self._answered(None)
        except TimeoutError:
            resp = None
            rec = build_record(None, chat=True, keep_text=False, error_kind="timeout",
                               error=f"no complete response in {cfg.request_timeout_s} s")
        except asyncio.CancelledError:
            rec = build_record(None, chat=True, keep_text=False, error_kind="cancelled",
                               error="run ended with the request in flight")
            rec["status"] = "cancelled"
            self._finish(base, t_send, rec)
            if conn is not None:
                conn.close()
            raise
        finally:
            self.c.inflight -= 1
        if resp is not None and self.virtual:  # the server's times, and what to follow
            self._answers[(key, k)] = ended(resp)
            sent = arrival_ns(resp)
            t_send = t_send if sent is None else sent
        if resp is not None:
            self._answered(resp)
            overflow = resp.status not in (0, 200) and is_context_overflow(
                resp.body()[:2000].decode("utf-8", "replace"))
            ok = resp.status == 200 and resp.complete and not resp.error
            # the lane goes on to its next turn now; the record is built by the digest task
            if (resp.status != 200 or not resp.complete) and conn is not None:
                conn.close()
                conn = None
            self.digest.submit(resp, lambda rec: self._finish(base, t_send, rec))
            end_ns = resp.pieces[-1][0] if resp.pieces else perf_counter_ns()
            wait_s = retry_after_s(resp.status, resp.headers)
            if wait_s:
                # an overloaded server (429/503) said when to come back: this stream waits
                self.c.notes.append(f"HTTP {resp.status} with Retry-After: the lane waited")
                await asyncio.sleep(wait_s)
                end_ns = perf_counter_ns()
            return conn, ok, overflow, end_ns
        if conn is not None:
            conn.close()
            conn = None
        self._finish(base, t_send, rec)
        if err is not None:
            await asyncio.sleep(RECONNECT_BACKOFF_S)
        return conn, False, False, perf_counter_ns()

    async def _connection(self, conn: Connection | None) -> Connection:
        """The lane's connection, fresh when it is closed or sat idle past keep-alive."""
        if conn is not None and not conn.closed and conn.stale(perf_counter_ns()):
            conn.close()
            self.c.reopened_idle += 1
        if conn is None or conn.closed:
            conn = await open_connection(self.ep)
            self.c.connections_opened += 1
        return conn

    def _finish(self, base: dict, t_send: int, rec: dict) -> None:
        if self.closed:
            return
        out = mark_impossible_usage({**base, "t_send_ns": t_send, **rec})
        if (out["status"] == "ok" and out["cached_tokens"] is None
                and self.cfg.absent_cached_tokens_are_zero):
            out["cached_tokens"] = 0
        if out.get("error"):
            # a 401 body quoting the bearer token, in any spelling (remembered when the lanes
            # were built), or a credential-shaped string the server echoed
            out["error"] = redact_text(out["error"])
        self.c.done += 1
        if out["status"] == "error":
            self.c.errors += 1
        self.c.stalled = self.c.stalled + 1 if out.get("error_kind") == STALLED else 0
        if self.c.stalled >= SERVER_GONE_FAILURES:
            # every stream stalls: the run would wait KEEPALIVE_ONLY_S per request to the end
            self.halt(f"the server sent keep-alives and no token to {self.c.stalled} requests "
                      f"in a row ({KEEPALIVE_ONLY_S:g} s each)")
        self.c.out_tokens += out.get("completion_tokens") or 0
        self.c.in_tokens += out.get("prompt_tokens") or out["sent_prompt_tokens"]
        try:
            self.write(out)
        except OSError as e:
            # a full disk: every later record would be lost too, so the run stops now
            # (it once ran on past its duration, its digest task dead)
            self.write_error = self.write_error or e
            self.closed = True
            self.halt(f"cannot write the records: {e.strerror or e}")
