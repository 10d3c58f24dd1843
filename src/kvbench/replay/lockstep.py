"""The client's side of a virtual-clock server (`serve-sim --clock virtual`, whose side is
sim/lockstep.py): each request names its lane and the run's lane count, a lane that ends says
so, and the times recorded are the server's.

The server's clock moves only while every lane has a request in it, so the client may be as
slow as the machine makes it: its lag delays the run, never a timing. A request's send time is
the arrival the server stamps (a response header); each event's time is the stamp in its JSON
(replay/stream.py reads it); a lane's think time is sent as a number instead of slept, and a
duration bound is checked against the lane's time in the server's clock (its last answer's
end plus the think time). Header names are the server's (a test ties the two)."""

from __future__ import annotations

import orjson

from kvbench.replay.http import Response

LANE_HEADER = "X-Kvbench-Lane"
LANES_HEADER = "X-Kvbench-Lanes"
THINK_HEADER = "X-Kvbench-Think-Ns"
ARRIVAL_HEADER = "x-kvbench-arrival-ns"  # as the client's parser keeps it: lower case
STAMP_FIELD = "kvbench_clock_ns"
LANE_END_PATH = "/kvbench/lane-end"
_STAMP = f'"{STAMP_FIELD}":'.encode()


def lane_headers(lane: int, lanes: int, think_ns: int) -> str:
    head = f"\r\n{LANE_HEADER}: {lane}\r\n{LANES_HEADER}: {lanes}"
    return head + (f"\r\n{THINK_HEADER}: {think_ns}" if think_ns else "")


def lane_end(host_header: str, base_path: str, lane: int, lanes: int) -> bytes:
    """The request that tells the server a lane sends nothing more."""
    body = orjson.dumps({"lane": lane, "lanes": lanes})
    return (f"POST {base_path}{LANE_END_PATH} HTTP/1.1\r\nHost: {host_header}\r\n"
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
    body without parsing it (the lane needs it before the digest has parsed the stream)."""
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
