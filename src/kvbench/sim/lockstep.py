"""The embedded engine's virtual clock (`serve-sim --clock virtual`): simulated time moves only
while no finished request still owes the client's answer, so how fast the client reads,
parses and sends never enters a timing.

A wall clock scaled 50x asks the client to answer within a fiftieth of the engine's time: on
two cores with one busy it fell behind in 17 of 18 quickstart runs (issue 27 item 10), and
the pace chosen to spare it still asked more than its probe measured (issue 39). Here the
engine is a discrete-event simulation whose inputs are the client's requests, and in a
closed loop every request but a lane's first follows one that ended: a turn after its
stream's previous one (plus a think time), a subagent's first turn after the turn that spawns
it, a lane's next session after its last one ended (workload/tree.py). So after each request
ends the clock waits until the client has said what follows it: each request it sends names
the one it follows (`X-Kvbench-After`), which of how many successors it is
(`X-Kvbench-Follows: i/n`) and its delay after that end (`X-Kvbench-Delay-Ns`), and a
successor it will not send, or an end with none, it resolves (POST /kvbench/resolve). A run
starts with its lanes (POST /kvbench/run), each lane's first request following the lane's
start. Requests that arrive while the clock waits are handed to the engine once nothing is
owed, in the order of what they follow (its end, then i): the order `kvbench simulate`'s
lanes submit them in, whatever order the client's packets came in. Each SSE event carries
the simulated time it happened at and each response its request's id and arrival
(`kvbench replay` records those instead of its own clock). A request without these headers
(curl) holds nothing: it runs at once, as fast as the CPU goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.units import MAX_SESSION_LANES

CLOCK_HEADER = "X-Kvbench-Clock"  # "virtual" on every response of a lockstep server
AFTER_HEADER = "X-Kvbench-After"
FOLLOWS_HEADER = "X-Kvbench-Follows"
DELAY_HEADER = "X-Kvbench-Delay-Ns"
REQUEST_HEADER = "X-Kvbench-Request"  # the request's id: what its successors name
ARRIVAL_HEADER = "X-Kvbench-Arrival-Ns"  # when the request arrived, simulated ns
STAMP_FIELD = "kvbench_clock_ns"  # in each SSE event: when it happened, simulated ns
RUN_PATH = "/kvbench/run"
RESOLVE_PATH = "/kvbench/resolve"


class LaneError(ValueError):
    """A succession header or control body the lockstep cannot take (the client's error)."""


@dataclass(frozen=True, slots=True)
class Successor:
    after: str  # the request (or "lane-<i>": the lane's start) this one follows
    index: int  # which of the `count` successors of `after`
    count: int
    delay_ns: int = 0


def successor_of(headers) -> Successor | None:
    """The succession headers of a request, or None when it carries none; LaneError when
    they are malformed."""
    after = headers.get(AFTER_HEADER)
    if after is None:
        return None
    raw_follows, raw_delay = headers.get(FOLLOWS_HEADER) or "", headers.get(DELAY_HEADER) or "0"
    try:
        index, _, count = raw_follows.partition("/")
        succ = Successor(after, int(index), int(count), int(raw_delay))
    except ValueError:
        raise LaneError(f"{FOLLOWS_HEADER} must be i/n and {DELAY_HEADER} an integer, got "
                        f"{raw_follows!r} and {raw_delay!r}") from None
    if not 0 <= succ.index < succ.count or succ.delay_ns < 0:
        raise LaneError(f"successor {succ.index} of {succ.count} after {after!r} with delay "
                        f"{succ.delay_ns} ns: allowed 0 <= i < n, delay >= 0")
    return succ


@dataclass(slots=True)
class _Owed:
    order: int  # when it ended, in end order (the lanes' starts first, by lane)
    at_s: float  # when it ended: its successors' delays count from here
    expect: int | None = None  # successors the client announced
    got: int = 0  # successors arrived or resolved as not sent


@dataclass(slots=True)
class Lockstep:
    """What the client still owes the clock; the requests that wait for it."""

    running: bool = False  # a run started (POST /kvbench/run)
    owed: dict[str, _Owed] = field(default_factory=dict)
    # requests that arrived while the clock waited: (order of what they follow, i), submit
    pending: list[tuple[tuple[int, int], int, Callable[[], None]]] = field(
        default_factory=list)
    _ends: int = 0
    _seq: int = 0

    def start_run(self, lanes: int, now_s: float) -> None:
        """A new run of `lanes` lanes, each owing its first request from `now_s` on."""
        if not 1 <= lanes <= MAX_SESSION_LANES:
            raise LaneError(f"lanes {lanes}: allowed 1..{MAX_SESSION_LANES}")
        self.running, self.pending = True, []
        self.owed = {f"lane-{i}": _Owed(i, now_s) for i in range(lanes)}
        self._ends = lanes

    def _count(self, after: str, count: int, n: int) -> _Owed:
        owed = self.owed.get(after)
        if owed is None:
            raise LaneError(f"{after!r} is not a request this run still owes an answer to "
                            "(unknown, or all its successors came)")
        if owed.expect is None:
            owed.expect = count
        elif owed.expect != count:
            raise LaneError(f"{after!r} was said to have {owed.expect} successors, now {count}")
        owed.got += n
        if owed.got > owed.expect:
            raise LaneError(f"{after!r} got {owed.got} successors of {owed.expect}")
        if owed.got == owed.expect:
            del self.owed[after]
        return owed

    def arrive(self, succ: Successor, submit: Callable[[float], None]) -> tuple[float, int]:
        """A successor: queued until nothing is owed, then submitted at its arrival (the end
        of what it follows plus its delay). Returns (arrival, ticket for `withdraw`)."""
        owed = self._count(succ.after, succ.count, 1)
        arrival = owed.at_s + succ.delay_ns / 1e9
        self._seq += 1
        self.pending.append(((owed.order, succ.index), self._seq, lambda: submit(arrival)))
        self.flush()
        return arrival, self._seq

    def resolve(self, after: str, count: int, skipped: int) -> None:
        """`skipped` of `after`'s `count` successors will not come (0 of 0: it has none)."""
        if skipped < 0 or count < 0:
            raise LaneError(f"count {count}, skipped {skipped}: allowed >= 0")
        self._count(after, count, skipped)
        self.flush()

    def ended(self, rid: str, at_s: float) -> None:
        """Request `rid` ended (answered, refused, failed or cancelled) at `at_s`: the clock
        waits for what follows it."""
        self._ends += 1
        self.owed[rid] = _Owed(self._ends, at_s)

    def withdraw(self, ticket: int) -> bool:
        """Out of the queue, if a request whose client went away is still there."""
        for i, (_, seq, _) in enumerate(self.pending):
            if seq == ticket:
                del self.pending[i]
                self.flush()
                return True
        return False

    def flush(self) -> None:
        """Once nothing is owed, hand the queued requests to the engine in the order of what
        they follow (the order the client's packets came in is the network's)."""
        if not self.pending or self.owed:
            return
        queued, self.pending = sorted(self.pending, key=lambda p: (p[0], p[1])), []
        for _, _, submit in queued:
            submit()

    def held(self) -> bool:
        """Whether the clock must wait: a request that ended still owes its successors."""
        return bool(self.owed) or bool(self.pending)
