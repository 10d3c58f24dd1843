"""Closed-loop session lanes: concurrency is the number of live sessions. Each lane replays a
session turn by turn (the next turn is sent when the previous ended plus its think time,
capped), then takes the next session; sessions are recycled while a bound (duration or request
count) remains, each pass in a fresh hash namespace so a recycled session cannot hit the cache
its previous pass filled."""

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
from kvbench.replay.config import ReplayConfig
from kvbench.replay.digest import Digest
from kvbench.replay.http import Connection, Endpoint, Response, open_connection
from kvbench.replay.ideal import IdealCache
from kvbench.replay.idle import SystemIdleCap
from kvbench.replay.overflow import is_context_overflow
from kvbench.replay.request import RequestFactory, build_record, mark_impossible_usage
from kvbench.workload.bounds import SessionPool, pass_key, pass_namespace
from kvbench.workload.prompt import PromptBuilder
from kvbench.workload.session import Session, Turn

RECONNECT_BACKOFF_S = 0.5
WARM_SLICE_BLOCKS = 32
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
    connections_opened: int = 0
    resent_unanswered: int = 0  # reused connection closed by the server before answering
    reopened_idle: int = 0  # reused connection idle past the server's keep-alive
    arrivals_delayed: int = 0  # open loop: session arrivals that waited for the live cap
    notes: list[str] = field(default_factory=list)
    # requests in a row that found no server, and when the first of them did
    unreachable: int = 0
    unreachable_since_ns: int = 0

    def connections(self) -> dict[str, int]:
        return {"opened": self.connections_opened, "resent_unanswered": self.resent_unanswered,
                "reopened_idle": self.reopened_idle}


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
        self.c = counters
        self.factory = RequestFactory(cfg, ep)
        self.digest = Digest(chat=self.factory.chat, keep_text=cfg.keep_text)
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
        # --workers each shard caps its own lanes' idleness (replay/idle.py)
        self.idle = (SystemIdleCap(cfg.system_idle_cap_s / (cfg.time_scale or 1.0))
                     if cfg.system_idle_cap_s is not None and cfg.session_rate is None
                     else None)
        self._overflowed: set[str] = set()  # sessions a context overflow ended

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

    async def run_lane(self, lane: int) -> None:
        conn: Connection | None = None
        if self.idle is not None:
            self.idle.lane_started()
        try:
            while (got := self.pool.take(lane)) is not None:
                session, pass_no, start = got
                conn = await self._replay_session(lane, session, pass_no, start, conn)
                if self.stopping:
                    break
        finally:
            if self.idle is not None:
                self.idle.lane_ended()
            if conn is not None:
                conn.close()

    async def run_open(self, rate_per_s: float, poisson: bool, seed: int) -> None:
        """Open loop: sessions arrive at `rate_per_s` (of the server's clock; Poisson or evenly
        spaced), each replayed turn by turn as a lane would, whatever the server's progress;
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
                got = self.pool.take(sid)
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

    async def _open_session(self, sid: int, got: tuple[Session, int, int],
                            cap: asyncio.Semaphore) -> None:
        conn = None
        try:
            conn = await self._replay_session(sid, *got, None)
        finally:
            cap.release()
            if conn is not None:
                conn.close()

    async def _replay_session(self, lane: int, session: Session, pass_no: int, start: int,
                              conn: Connection | None) -> Connection | None:
        namespace, key = pass_namespace(session, pass_no), pass_key(session, pass_no)
        prev_end: int | None = None
        turns = [(k, t) for k, raw in enumerate(session.turns)
                 if (t := self.bounds.shaped(raw)) is not None]
        ahead: asyncio.Task | None = None
        try:
            for i, (k, turn) in enumerate(turns):
                if ahead is not None:
                    await ahead
                # The next turn's first-seen blocks are rendered while this one is in flight:
                # with no think time (the quickstart's) a 68K-token context took 29 ms to
                # render between the previous turn's end and the send, which the send
                # lateness check counted against the client (1.5 s of a 50x server's clock)
                ahead = (asyncio.create_task(self._warm(turns[i + 1][1], namespace))
                         if i + 1 < len(turns) else None)
                conn, prev_end, go_on = await self._turn(lane, key, k, turn, k < start,
                                                         namespace, prev_end, conn)
                if not go_on:
                    return conn
        finally:
            if ahead is not None and not ahead.done():
                ahead.cancel()
        return conn

    async def _turn(self, lane: int, key: str, k: int, turn: Turn, warm_turn: bool,
                    namespace: str, prev_end: int | None,
                    conn: Connection | None) -> tuple[Connection | None, int | None, bool]:
        """One turn of a session: wait out its think time, send it; returns the connection,
        when the turn ended, and whether the session goes on."""
        cfg, bounds = self.cfg, self.bounds
        # A session's first turn has no schedule to be late against: only turns that follow
        # a predecessor by a think time carry a target, so lateness measures the client.
        target: int | None = None
        if prev_end is not None and not warm_turn:
            think = bounds.think_s(turn) / cfg.time_scale
            target = prev_end + int(think * 1e9)
            # what the prefetch has not rendered yet is rendered while the user "thinks", as
            # an agent has its prompt ready when it sends: lateness is then the client
            # failing the schedule, not text synthesis the schedule leaves time for
            await self._warm(turn, namespace)
            if self.idle is not None:
                target = await self.idle.sleep_until(target, self.deadline_ns)
            else:
                wait = (target - perf_counter_ns()) / 1e9
                if self.deadline_ns is not None:
                    wait = min(wait, (self.deadline_ns - perf_counter_ns()) / 1e9)
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.deadline_ns is not None and target >= self.deadline_ns:
                # due after the run's end: the sleep ended at the deadline (the loop may wake
                # a timer a clock tick early, when _may_send would still pass)
                self.stopping = True
                return conn, prev_end, False
        is_warmup = bounds.is_warmup(warm_turn, self.c.sent)
        if not self._may_send(is_warmup):
            return conn, prev_end, False
        conn = await self._one(lane, key, k, turn, namespace, target, is_warmup, conn)
        if key in self._overflowed:  # every later turn is longer: the session ends here
            self._overflowed.discard(key)
            return conn, perf_counter_ns(), False
        return conn, perf_counter_ns(), True

    async def _warm(self, turn: Turn, namespace: str) -> None:
        """Render the turn's first-seen blocks in slices, yielding between them: a new
        100K-token context must not stall the loop that timestamps every other lane's bytes."""
        missing = self.prompts.missing(turn, namespace)
        for i in range(0, len(missing), WARM_SLICE_BLOCKS):
            self.prompts.warm(namespace, missing[i:i + WARM_SLICE_BLOCKS], turn.block_tokens)
            await asyncio.sleep(0)

    async def _one(self, lane: int, key: str, k: int, turn: Turn, namespace: str,
                   target: int | None, is_warmup: bool,
                   conn: Connection | None) -> Connection | None:
        cfg = self.cfg
        self._seq += self._seq_step
        self.c.sent += 1
        if not is_warmup:
            self.c.profiled_sent += 1
        max_tokens = self.bounds.max_tokens(turn)
        # turns that follow no think time (a session's first, warm-up turns): render now
        await self._warm(turn, namespace)
        prompt = self.prompts.build(turn, namespace, (key, k))
        base = {"request_id": f"{lane}-{self._seq}", "session_id": key, "turn": k, "lane": lane,
                "agent": turn.agent, "is_warmup": is_warmup, "t_target_ns": target,
                "sent_prompt_tokens": prompt.num_tokens, "max_tokens": max_tokens,
                "ideal_cached_tokens": self.ideal.observe(turn, namespace)}
        body = self.factory.body(prompt, max_tokens)
        self.c.inflight += 1
        t_send, err = perf_counter_ns(), None
        resp: Response | None = None
        try:
            resent = refitted = False
            while True:
                conn = await self._connection(conn)
                reused = conn.served > 0
                t_send, resp = await asyncio.wait_for(
                    conn.request(self.factory.encode(body, key)), cfg.request_timeout_s)
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
                body = self.factory.body(prompt, max_tokens)
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
        if resp is not None:
            self._answered(resp)
            if (cfg.end_session_on_context_overflow and resp.status not in (0, 200)
                    and is_context_overflow(resp.body()[:2000].decode("utf-8", "replace"))):
                self._overflowed.add(key)
            # the lane goes on to its next turn now; the record is built by the digest task
            if (resp.status != 200 or not resp.complete) and conn is not None:
                conn.close()
                conn = None
            self.digest.submit(resp, lambda rec: self._finish(base, t_send, rec))
            wait_s = retry_after_s(resp.status, resp.headers)
            if wait_s:
                # an overloaded server (429/503) said when to come back: this lane waits
                self.c.notes.append(f"HTTP {resp.status} with Retry-After: the lane waited")
                await asyncio.sleep(wait_s)
            return conn
        if conn is not None:
            conn.close()
            conn = None
        self._finish(base, t_send, rec)
        if err is not None:
            await asyncio.sleep(RECONNECT_BACKOFF_S)
        return conn

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
        self.c.out_tokens += out.get("completion_tokens") or 0
        self.c.in_tokens += out.get("prompt_tokens") or out["sent_prompt_tokens"]
        self.write(out)
