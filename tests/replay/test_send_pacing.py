"""The replay keeps its schedule at scale by construction: every lane's first prompts are
rendered before the run's clock starts, no pass of the event loop writes more than its
budget of request bytes, and a turn that follows a response is due from that response's last
byte, not from when its task got the loop back. Asserted by order and by counting, never by
timing."""

from __future__ import annotations

import asyncio
import time

import pytest
from fixtures.body_recorder import Recorder

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, replay
from kvbench.replay.http import Connection
from kvbench.replay.lanes import Lanes
from kvbench.replay.pacing import PassBudget
from kvbench.replay.request import RequestFactory
from kvbench.workload import SyntheticSpec

LANES = 8
# 8 sessions of ~700-5,400-token prompts (~4-32 KB bodies), one stream each
SPEC = SyntheticSpec(num_sessions=LANES, seed=1, scale=0.05, max_turns=3, subagent_prob=0.0)


def _replay(tmp_path, **over) -> dict:
    async def run() -> dict:
        rec = Recorder()
        srv = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=tmp_path,
                           concurrency=LANES, max_tokens_cap=2, synthetic=SPEC,
                           **{"think_time_scale": 0, **over})
        async with srv:
            return await replay(cfg)

    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        return runner.run(run())


def test_every_lanes_first_prompt_is_rendered_before_the_first_send(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []  # ("render" | "send" | "clock", session key)
    real_warm, real_one, real_prepare = Lanes._warm, Lanes._one, Lanes.prepare

    async def warm(self, stream, turn, namespace, *rest):
        if self.prompts.sync(stream, turn, namespace, 0):  # blocks left to render
            events.append(("render", namespace))
        await real_warm(self, stream, turn, namespace, *rest)

    async def one(self, lane, key, k, turn, namespace, *rest):
        events.append(("send", namespace))
        return await real_one(self, lane, key, k, turn, namespace, *rest)

    async def prepare(self, lane_ids):
        await real_prepare(self, lane_ids)
        events.append(("clock", ""))
        firsts.extend((tree, ready) for tree, ready in self.first_trees.values())

    firsts: list = []
    monkeypatch.setattr(Lanes, "_warm", warm)
    monkeypatch.setattr(Lanes, "_one", one)
    monkeypatch.setattr(Lanes, "prepare", prepare)
    summary = _replay(tmp_path, max_requests=2 * LANES)

    assert len(firsts) == LANES
    clock = events.index(("clock", ""))
    first_send = next(i for i, (what, _) in enumerate(events) if what == "send")
    assert clock < first_send
    first_namespaces = {tree.namespace for tree, _ in firsts}
    # each lane's first context was rendered during the preparation, none after the clock
    rendered_before = {ns for what, ns in events[:clock] if what == "render"}
    assert rendered_before == first_namespaces
    # ...and nothing of a first context was left to render when its first turn was sent
    for ns in first_namespaces:
        sent = events.index(("send", ns))
        assert ("render", ns) not in events[clock:sent]
    run = summary["run"]
    tokens = sum(tree.run.turns[r.k].input_tokens for tree, ready in firsts for r in ready)
    assert run["prepared_prompt_tokens"] == tokens > 0
    assert run["prepare_s"] > 0
    # the records say it too: the first turns' prompts were ready before the clock started
    recs = read_jsonl(tmp_path / "records.jsonl")
    firsts_sent = [r for r in recs if r["turn"] == 0 and r["t_target_ns"] is None]
    assert len(firsts_sent) >= LANES
    by_key = {tree.key for tree, _ in firsts}
    assert all(r["t_ready_ns"] < run["profiling_started_ns"] for r in firsts_sent
               if r["session_id"] in by_key)
    assert all(r["t_ready_ns"] <= r["t_send_ns"] for r in recs)


class CountingLoop(asyncio.SelectorEventLoop):
    """The standard event loop, counting its passes (one `_run_once` each)."""

    passes = 0

    def _run_once(self) -> None:
        self.passes += 1
        super()._run_once()


def _within_budget(sizes: list[int], budget: int) -> bool:
    """One loop pass holds at most two of the budget's passes (replay/pacing.py), each at
    most `budget` bytes or one body alone: `sizes` (in the order written) split so."""
    def ok(group: list[int]) -> bool:
        return len(group) <= 1 or sum(group) <= budget

    return any(ok(sizes[:j]) and ok(sizes[j:]) for j in range(len(sizes) + 1))


def test_no_loop_pass_writes_more_than_its_budget(tmp_path, monkeypatch):
    """Eight lanes' first turns are due at once: with a budget of ~2 bodies they leave over
    several passes, and no pass wrote more than its budget allows."""
    budget = 40_000
    written: list[tuple[int, int]] = []  # (loop pass, prompt bytes written)
    real_init, real_encode = Lanes.__init__, RequestFactory.encode

    def init(self, *a, **k):
        real_init(self, *a, **k)
        self.sends = PassBudget(budget)

    def encode(self, body, key, prompt, extra=""):
        # joined and written in the same pass (no await between the two)
        written.append((asyncio.get_running_loop().passes, sum(map(len, prompt.pieces))))
        return real_encode(self, body, key, prompt, extra)

    monkeypatch.setattr(Lanes, "__init__", init)
    monkeypatch.setattr(RequestFactory, "encode", encode)
    _replay(tmp_path, max_requests=2 * LANES)

    per_pass: dict[int, list[int]] = {}
    for n, size in written:
        per_pass.setdefault(n, []).append(size)
    assert len(written) == 2 * LANES
    assert sum(size for _, size in written[:LANES]) > 2 * budget  # it had to spread them
    assert all(_within_budget(sizes, budget) for sizes in per_pass.values()), per_pass


def test_sends_that_wait_leave_by_their_schedule_within_the_budget():
    """Sends asking at once: the first that fit go, the rest by due time (those with none
    last, in the order they asked), no loop pass over its budget, a larger body alone."""
    budget = 64
    # (name, bytes, due ns or None)
    sends = [("a", 30, None), ("b", 30, None), ("c", 30, None), ("d", 100, None),
             ("e", 10, 5), ("f", 10, 1), ("g", 50, None), ("h", 50, 9)]
    got: list[tuple[str, int, int]] = []  # (name, bytes, loop pass)

    async def run() -> int:
        pacer = PassBudget(budget)
        loop = asyncio.get_running_loop()

        async def send(name: str, size: int, due: int | None) -> None:
            await pacer.admit(size, due)
            got.append((name, size, loop.passes))

        await asyncio.gather(*(send(*x) for x in sends))
        return pacer.deferred

    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        deferred = runner.run(run())
    assert [name for name, _, _ in got] == ["a", "b", "f", "e", "h", "c", "d", "g"]
    assert deferred == len(sends) - 2
    per_pass: dict[int, list[int]] = {}
    for _, size, n in got:
        per_pass.setdefault(n, []).append(size)
    assert len(per_pass) >= 4
    assert all(_within_budget(sizes, budget) for sizes in per_pass.values()), per_pass


def test_a_turn_is_due_from_its_predecessors_last_byte(tmp_path, monkeypatch):
    """With no think time the next turn's target is the instant the previous response's last
    byte was read, even when the lane's task got the loop back much later (held here for
    20 ms by a blocking call after each response): that delay is the client's lateness."""
    last_byte: dict[asyncio.Task, int] = {}
    ends: dict[tuple[str, int], int] = {}
    real_request, real_one = Connection.request, Lanes._one

    async def request(self, raw):
        t_send, resp = await real_request(self, raw)
        last_byte[asyncio.current_task()] = resp.pieces[-1][0]
        return t_send, resp

    async def one(self, lane, key, k, *rest):
        out = await real_one(self, lane, key, k, *rest)
        ends[(key, k)] = last_byte.pop(asyncio.current_task())
        time.sleep(0.02)  # the loop is held: the lane goes on late
        return out

    monkeypatch.setattr(Connection, "request", request)
    monkeypatch.setattr(Lanes, "_one", one)
    _replay(tmp_path, max_requests=2 * LANES)

    recs = read_jsonl(tmp_path / "records.jsonl")
    followed = [r for r in recs if r["t_target_ns"] is not None]
    assert len(followed) >= LANES
    for r in followed:
        prev = max(k for (key, k) in ends if key == r["session_id"] and k < r["turn"])
        # equal but for the float round trip through the trees' clock (nanoseconds)
        assert abs(r["t_target_ns"] - ends[(r["session_id"], prev)]) < 1_000
        assert r["t_send_ns"] - r["t_target_ns"] >= 20_000_000  # counted as lateness


def test_no_loop_pass_renders_more_than_its_budget_of_blocks(tmp_path, monkeypatch):
    """Rendering is paced like sending, in blocks: eight lanes' first contexts, rendered
    together for their warm-up, and each turn's added blocks render a slice per admission,
    no loop pass over two budgets."""
    from kvbench.replay import lanes as lanes_mod
    from kvbench.workload.prompt import PromptBuilder

    budget, slice_blocks = 6, 3
    monkeypatch.setattr(lanes_mod, "RENDER_PASS_BLOCKS", budget)
    monkeypatch.setattr(lanes_mod, "WARM_SLICE_BLOCKS", slice_blocks)
    rendered: dict[int, int] = {}  # loop pass -> blocks rendered in it
    real_own = PromptBuilder._own

    def own(self, prefix, ids, bs):
        n = asyncio.get_running_loop().passes
        rendered[n] = rendered.get(n, 0) + len(ids)
        return real_own(self, prefix, ids, bs)

    monkeypatch.setattr(PromptBuilder, "_own", own)
    # with a warm-up every lane renders its first context at once, after the clock
    _replay(tmp_path, max_requests=2 * LANES, warmup_per_lane=1)
    assert sum(rendered.values()) > 4 * budget  # it had to spread them
    assert max(rendered.values()) <= 2 * budget, rendered


def test_waiting_callers_sleep_until_their_pass():
    """A hundred callers waiting on a budget of one each wake once, when their pass comes:
    the loop runs a few callbacks per caller, not one per caller per pass."""
    n = 100

    class Counting(CountingLoop):
        callbacks = 0

        def _run_once(self) -> None:
            self.callbacks += len(self._ready)
            super()._run_once()

    async def run() -> list[int]:
        pacer = PassBudget(1)
        order: list[int] = []

        async def one(i: int) -> None:
            await pacer.admit(1, i)
            order.append(i)

        await asyncio.gather(*(one(i) for i in reversed(range(n))))
        return order

    with asyncio.Runner(loop_factory=Counting) as runner:
        order = runner.run(run())
        loop = runner.get_loop()
    assert order == [n - 1, *range(n - 1)]  # the first to ask went at once, then due order
    assert loop.passes >= n  # one a pass
    assert loop.callbacks < 6 * n  # spinning waiters would be ~n * n / 2


@pytest.mark.parametrize("ahead_s", [0.05, -1.0])
def test_a_stale_connection_is_replaced_before_the_turn_is_due(tmp_path, monkeypatch, ahead_s):
    """A lane whose kept-alive connection will be stale when its next turn is due (here
    every served connection is: no idle time allowed) opens the next one before the turn
    (`CONNECT_AHEAD_S`): no timed send opens a connection, each reopening is counted. With
    the connect-ahead still pending when the turn is due (-1: a second after it, as when a
    render or the loop ran late), the send opens it then, the same way."""
    import math

    from kvbench.replay import http
    from kvbench.replay import lanes as lanes_mod

    monkeypatch.setattr(http, "DEFAULT_IDLE_S", 0.0)
    monkeypatch.setattr(lanes_mod, "CONNECT_AHEAD_S", ahead_s)
    sends: dict[asyncio.Task, int | None] = {}  # the sending task -> its target
    opened_by_send: list[int | None] = []  # the target of each send that opened its own
    real_one, real_connection = Lanes._one, Lanes._connection

    async def one(self, lane, key, k, turn, namespace, target, *rest):
        sends[asyncio.current_task()] = target
        return await real_one(self, lane, key, k, turn, namespace, target, *rest)

    async def connection(self, conn):
        if conn is None or conn.closed or conn.stale(time.perf_counter_ns()):
            opened_by_send.append(sends.get(asyncio.current_task()))
        return await real_connection(self, conn)

    monkeypatch.setattr(Lanes, "_one", one)
    monkeypatch.setattr(Lanes, "_connection", connection)
    # two sessions of four turns, 0.2 s of think time before each turn after the first
    spec = SyntheticSpec(num_sessions=2, seed=3, scale=0.02, max_turns=4, turns_mu=3.0,
                         subagent_prob=0.0, think_mu=math.log(0.2), think_sigma=0.0,
                         zero_think_frac=0.0)

    async def run() -> dict:
        rec = Recorder()
        srv = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=tmp_path,
                           concurrency=2, max_tokens_cap=2, synthetic=spec, max_requests=6)
        async with srv:
            return await replay(cfg)

    summary = asyncio.run(run())
    timed = [t for t in sends.values() if t is not None]
    assert len(timed) >= 3
    assert all(t is None for t in opened_by_send)  # only the first turns opened their own
    conns = summary["run"]["connections"]
    assert conns["reopened_idle"] >= len(timed)
    assert conns["opened"] == len(opened_by_send) + conns["reopened_idle"]
