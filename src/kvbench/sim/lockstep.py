"""The embedded engine's virtual clock (`serve-sim --clock virtual`): simulated time moves only
while every session lane of the client has its request in the engine, so how fast the client
reads, parses and sends never enters a timing.

A wall clock scaled 50x asks the client to answer within a fiftieth of the engine's time: on
two cores with one busy it fell behind in 17 of 18 quickstart runs (issue 27 item 10) and the
pace chosen to spare it still asked more than its probe measured (issue 39). Here the engine
is a discrete-event simulation whose only inputs are the lanes: a closed loop's next request
can arrive no earlier than its lane's previous answer ended (plus the think time the client
names), so the engine may run ahead to its next event whenever no lane owes it a request, and
must wait while one does. Timings are then the engine's own: each SSE event carries the
simulated time it happened at and each response its request's simulated arrival
(`kvbench replay` records those instead of its own clock).

The client announces its lanes (`X-Kvbench-Lanes`), names the lane of each request
(`X-Kvbench-Lane`) and says when a lane ends (POST /kvbench/lane-end). Requests that arrive
while the clock waits are queued and handed to the engine once every lane is accounted for,
in the order their lanes' previous requests finished (lane order for first requests): the
order `kvbench simulate`'s lanes submit them in, whatever order the client's packets came
in. A request without the lane headers (curl) holds nothing: it runs at once, as fast as the
CPU goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvbench.units import MAX_SESSION_LANES

CLOCK_HEADER = "X-Kvbench-Clock"  # "virtual" on every response of a lockstep server
LANE_HEADER = "X-Kvbench-Lane"
LANES_HEADER = "X-Kvbench-Lanes"
THINK_HEADER = "X-Kvbench-Think-Ns"  # the lane's idle gap before this request, simulated ns
ARRIVAL_HEADER = "X-Kvbench-Arrival-Ns"  # when the request arrived, simulated ns
STAMP_FIELD = "kvbench_clock_ns"  # in each SSE event: when it happened, simulated ns
LANE_END_PATH = "/kvbench/lane-end"


class LaneError(ValueError):
    """A lane header or lane-end body the lockstep cannot take (the client's error: 400)."""


@dataclass(frozen=True, slots=True)
class LaneRequest:
    lane: int
    lanes: int
    think_ns: int = 0


def lane_of(headers, parse_int: Callable[[str], int] = int) -> LaneRequest | None:
    """The lane headers of a request, or None when it carries none; LaneError when they are
    malformed or contradict each other."""
    raw_lane, raw_lanes = headers.get(LANE_HEADER), headers.get(LANES_HEADER)
    if raw_lane is None and raw_lanes is None:
        return None
    try:
        lane, lanes = parse_int(raw_lane or ""), parse_int(raw_lanes or "")
        think = parse_int(headers.get(THINK_HEADER) or "0")
    except ValueError:
        raise LaneError(f"{LANE_HEADER} and {LANES_HEADER} must both be integers, got "
                        f"{raw_lane!r} and {raw_lanes!r}") from None
    if not 1 <= lanes <= MAX_SESSION_LANES or not 0 <= lane < lanes or think < 0:
        raise LaneError(f"lane {lane} of {lanes} (think {think} ns): allowed 0 <= lane < lanes "
                        f"<= {MAX_SESSION_LANES}, think >= 0")
    return LaneRequest(lane, lanes, think)


@dataclass(slots=True)
class Lockstep:
    """Which lanes have a request in the engine; whether the clock may move."""

    lanes: int | None = None  # announced by the client's first request
    busy: dict[int, int] = field(default_factory=dict)  # lane -> its requests in the engine
    ended: set[int] = field(default_factory=set)
    # requests that arrived while the clock waited: (lane, order of arrival, submit)
    pending: list[tuple[int, int, Callable[[], None]]] = field(default_factory=list)
    _seq: int = 0
    _queued: dict[int, int] = field(default_factory=dict)  # lane -> its queued requests
    # lane -> when (in finish order) its last request left the engine: the submit order
    _finished_at: dict[int, int] = field(default_factory=dict)
    _finishes: int = 0

    def _announce(self, lanes: int) -> None:
        if (self.lanes is not None and len(self.ended) == self.lanes and not self.busy
                and not self.pending):  # the last run is over: the next one starts
            self.lanes = None
            self.ended.clear()
            self._finished_at.clear()
        if self.lanes is None:
            self.lanes = lanes
        elif lanes != self.lanes:
            raise LaneError(f"{LANES_HEADER} {lanes} contradicts the {self.lanes} lanes this "
                            "server's clock follows (one run at a time per virtual-clock "
                            "server)")

    def arrive(self, lane: LaneRequest, submit: Callable[[], None]) -> int:
        """A lane's request: queued until every lane is accounted for, then submitted.
        Returns its ticket (for `withdraw`)."""
        self._announce(lane.lanes)
        if lane.lane in self.ended:
            raise LaneError(f"lane {lane.lane} sent a request after it ended")
        self._seq += 1
        self.pending.append((lane.lane, self._seq, submit))
        self._queued[lane.lane] = self._queued.get(lane.lane, 0) + 1
        ticket = self._seq
        self.flush()
        return ticket

    def withdraw(self, lane: int, ticket: int) -> None:
        """The client of a request went away: out of the queue if it is still there, else
        out of the engine's count."""
        for i, (queued_lane, seq, _) in enumerate(self.pending):
            if seq == ticket:
                del self.pending[i]
                self._unqueue(queued_lane)
                self.flush()
                return
        self.finished(lane)

    def _unqueue(self, lane: int) -> None:
        left = self._queued[lane] - 1
        if left:
            self._queued[lane] = left
        else:
            del self._queued[lane]

    def end(self, lane: int, lanes: int) -> None:
        if not 0 <= lane < lanes <= MAX_SESSION_LANES:
            raise LaneError(f"lane {lane} of {lanes}: allowed 0 <= lane < lanes <= "
                            f"{MAX_SESSION_LANES}")
        self._announce(lanes)
        self.ended.add(lane)
        self.flush()

    def finished(self, lane: int) -> None:
        """The lane's request left the engine (answered, failed or cancelled)."""
        self._finishes += 1
        self._finished_at[lane] = self._finishes
        left = self.busy.get(lane, 0) - 1
        if left > 0:
            self.busy[lane] = left
        else:
            self.busy.pop(lane, None)

    def _owing(self) -> int:
        """Lanes that have neither a request in the engine or queued nor ended."""
        if self.lanes is None:
            return 0
        accounted = self.busy.keys() | self._queued.keys() | self.ended
        return self.lanes - len(accounted)

    def flush(self) -> None:
        """Once no lane owes a request, hand the queued ones to the engine in the order their
        lanes' last requests finished (the order the client's packets came in is the
        network's, not the workload's)."""
        if not self.pending or self._owing():
            return
        queued, self.pending = sorted(
            self.pending, key=lambda p: (self._finished_at.get(p[0], 0), p[0], p[1])), []
        for lane, _, submit in queued:
            self._unqueue(lane)
            self.busy[lane] = self.busy.get(lane, 0) + 1
            submit()

    def held(self) -> bool:
        """Whether the clock must wait: a lane owes its next request."""
        return bool(self.pending) or self._owing() > 0
