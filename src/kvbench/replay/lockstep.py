"""The client's side of a virtual-clock server (`serve-sim --clock virtual`, whose side is
sim/lockstep.py): the server's clock waits after each request ends until the client has said
what follows it, so the client may be as slow as the machine makes it: its lag delays the run,
never a timing.

A run starts with its lanes (POST /kvbench/run, which answers the server's time). Every
request names what it follows (a request id the server gave, or `lane-<i>` for a lane's
first), which of how many successors it is, and its delay after that end in the server's
clock (its think time or its spawn offset, workload/tree.py), instead of the client sleeping
it; a successor the client will not send (the run's bound, a deadline), or an end with none,
is resolved (POST /kvbench/resolve). The times recorded are the server's: a request's send is
the arrival it stamps (a response header), each event's time the stamp in its JSON
(replay/stream.py). Header names are the server's (a test ties the two)."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

import orjson

from kvbench.errors import ReplayError
from kvbench.replay.http import DIRECT, Response

AFTER_HEADER = "X-Kvbench-After"
FOLLOWS_HEADER = "X-Kvbench-Follows"
DELAY_HEADER = "X-Kvbench-Delay-Ns"
REQUEST_HEADER = "x-kvbench-request"  # as the client's parser keeps them: lower case
ARRIVAL_HEADER = "x-kvbench-arrival-ns"
STAMP_FIELD = "kvbench_clock_ns"
RUN_PATH = "/kvbench/run"
RESOLVE_PATH = "/kvbench/resolve"
_STAMP = f'"{STAMP_FIELD}":'.encode()
START_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class After:
    """What a request follows: `rid` (a request id, or `lane-<i>`), which ended at `at_s`
    (the server's clock), and which of its `count` successors this is."""

    rid: str
    at_s: float
    index: int
    count: int

    def headers(self, send_at_s: float) -> str:
        delay = max(0, round((send_at_s - self.at_s) * 1e9))
        return (f"\r\n{AFTER_HEADER}: {self.rid}\r\n{FOLLOWS_HEADER}: {self.index}/{self.count}"
                f"\r\n{DELAY_HEADER}: {delay}")


def successors(rid: str, at_s: float, n: int) -> list[After]:
    return [After(rid, at_s, i, n) for i in range(n)]


def start_run(base_url: str, lanes: int) -> float:
    """Tell the server a run of `lanes` lanes begins; its clock's time now, in seconds."""
    base = base_url.rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(f"{base}{RUN_PATH}", data=orjson.dumps({"lanes": lanes}),
                                 headers={"Content-Type": "application/json"})
    try:
        with DIRECT.open(req, timeout=START_TIMEOUT_S) as r:
            return orjson.loads(r.read())["now_ns"] / 1e9
    except Exception as e:  # any failure here leaves the run nothing to stand on
        raise ReplayError(f"the virtual-clock server refused the run's start: {e}") from None


def resolve_request(host_header: str, base_path: str, after: str, count: int,
                    skipped: int) -> bytes:
    """`skipped` of `after`'s `count` successors will not be sent (0 of 0: none follows)."""
    body = orjson.dumps({"after": after, "count": count, "skipped": skipped})
    return (f"POST {base_path}{RESOLVE_PATH} HTTP/1.1\r\nHost: {host_header}\r\n"
            f"User-Agent: kvbench-replay\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def arrival_ns(resp: Response) -> int | None:
    """When the server says the request arrived, in its clock (ns)."""
    raw = resp.headers.get(ARRIVAL_HEADER)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def last_stamp_ns(resp: Response) -> int | None:
    """The time of the response's last stamped event (its end), found from the back of the
    body without parsing it (the stream's successors need it before the digest has parsed
    the stream)."""
    tail = b""
    for _, piece in reversed(resp.pieces):
        tail = piece + tail
        at = tail.rfind(_STAMP)
        if at >= 0:
            digits = tail[at + len(_STAMP):].lstrip()
            end = 0
            while end < len(digits) and digits[end:end + 1].isdigit():
                end += 1
            if end and end < len(digits):  # the number is whole
                return int(digits[:end])
    return None


def ended(resp: Response) -> tuple[str, float] | None:
    """(the request's id, when it ended in the server's clock) from a virtual-clock server's
    answer, or None where it says neither."""
    rid = resp.headers.get(REQUEST_HEADER)
    end = last_stamp_ns(resp) if resp.status == 200 else None
    end = end if end is not None else arrival_ns(resp)
    return None if rid is None or end is None else (rid, end / 1e9)
