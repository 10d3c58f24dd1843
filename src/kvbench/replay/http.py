"""A minimal HTTP/1.1 client connection for streaming responses, on asyncio's Protocol API.

The read path only appends `(perf_counter_ns(), bytes)`: the timestamp is taken when the bytes
arrive, before any parsing, and nothing is parsed until the response is complete (one cheap
suffix test per read detects the end of a chunked body). There is no line-length limit and no
fixed read buffer to outgrow, so 100K-token contexts and huge SSE lines cost nothing extra."""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
from bisect import bisect_right
from dataclasses import dataclass, field
from time import perf_counter_ns
from urllib.parse import urlsplit

from kvbench.errors import ReplayError

_CHUNKED_END = b"0\r\n\r\n"
RCVBUF_BYTES = 4 << 20


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    pieces: list[tuple[int, bytes]]  # (arrival ns, body bytes) per read, dechunked
    t_first_byte_ns: int
    complete: bool = True
    error: str | None = None

    def body(self) -> bytes:
        return b"".join(p for _, p in self.pieces)


@dataclass(slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    base_path: str
    host_header: str = field(default="")

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ReplayError(
                f"url {url!r} is not an http(s) URL",
                hint="e.g. --url http://127.0.0.1:8000",
            )
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[:-3]
        return cls(parts.hostname, port, tls, path, f"{parts.hostname}:{port}")


class Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time (a session lane owns it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._times: list[int] = []
        self._reads: list[bytes] = []
        self._head: tuple[int, dict[str, str], int] | None = None  # status, headers, body offset
        self._mode = ""  # "chunked" | "length" | "eof"
        self._length = 0
        self._got = 0
        self._waiter: asyncio.Future | None = None

    # --- protocol callbacks (the hot path) ---
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        self._times.append(perf_counter_ns())
        self._reads.append(data)
        if self._waiter is None:
            return
        if self._mode == "chunked":
            if data[-5:] == _CHUNKED_END or (len(data) < 5 and self._tail_is_end()):
                self._maybe_done()
        elif self._mode == "length":
            self._got += len(data)
            if self._got >= self._length:
                self._finish()
        elif self._head is None:
            self._parse_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result("eof")

    # --- internals ---
    def _tail_is_end(self) -> bool:
        return b"".join(self._reads[-3:])[-5:] == _CHUNKED_END

    def _parse_head(self) -> None:
        raw = b"".join(self._reads)
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = raw[:end].decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._fail(f"bad status line {lines[0][:80]!r}")
            return
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        self._head = (status, headers, end + 4)
        body_len = len(raw) - end - 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
            if raw.endswith(_CHUNKED_END) and body_len >= 5:
                self._maybe_done()
        elif "content-length" in headers:
            self._mode, self._length, self._got = "length", int(headers["content-length"]), body_len
            if self._got >= self._length:
                self._finish()
        else:
            self._mode = "eof"

    def _maybe_done(self) -> None:
        if _dechunk(self._body_reads()) is not None:
            self._finish()

    def _body_reads(self) -> list[tuple[int, bytes]]:
        assert self._head is not None
        offset = self._head[2]
        out = []
        for t, data in zip(self._times, self._reads, strict=True):
            if offset >= len(data):
                offset -= len(data)
                continue
            out.append((t, data[offset:] if offset else data))
            offset = 0
        return out

    def _finish(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result("done")

    def _fail(self, why: str) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(why)

    # --- API ---
    async def request(self, raw: bytes) -> tuple[int, Response]:
        """Send one request; return (send ns, response). A transport failure is a Response
        with `error` set (a per-request failure is a record, not an exception)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._times, self._reads, self._head, self._mode = [], [], None, ""
        self._waiter = loop.create_future()
        t_send = perf_counter_ns()
        self.transport.write(raw)
        try:
            why = await self._waiter
        finally:
            self._waiter = None
        return t_send, self._response(why)

    def _response(self, why: str) -> Response:
        if self._head is None:
            if self._reads:
                self._parse_head()
            if self._head is None:
                err = "connection closed before a response" if why == "eof" else why
                return Response(0, {}, [], 0, complete=False, error=err)
        status, headers, _ = self._head
        t_first = self._times[0] if self._times else 0
        reads = self._body_reads()
        if self._mode == "chunked":
            pieces = _dechunk(reads)
            if pieces is None:
                return Response(status, headers, reads, t_first, complete=False,
                                error="stream ended before the final chunk")
        else:
            pieces = reads
            if self._mode == "length" and self._got < self._length:
                return Response(status, headers, pieces, t_first, complete=False,
                                error="body shorter than Content-Length")
        if headers.get("connection", "").lower() == "close" or self._mode == "eof":
            self.close()
        return Response(status, headers, pieces, t_first)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _dechunk(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]] | None:
    """Undo chunked framing, keeping each payload byte with the time of the read it came in.
    None if the body is not complete yet."""
    raw = b"".join(d for _, d in reads) if len(reads) != 1 else reads[0][1]
    ends: list[int] = []
    acc = 0
    for _, d in reads:
        acc += len(d)
        ends.append(acc)
    out: list[tuple[int, bytes]] = []
    pos = 0
    n = len(raw)
    find = raw.find
    while True:
        eol = find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(raw[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            return None
        start = eol + 2
        if size == 0:
            return out if find(b"\r\n\r\n", eol) >= 0 else None
        stop = start + size
        if stop + 2 > n:
            return None
        # split the payload at read boundaries so each byte keeps its arrival time
        i = bisect_right(ends, start)
        while start < stop:
            cut = min(ends[i], stop)
            t = reads[i][0]
            if out and out[-1][0] == t:
                out[-1] = (t, out[-1][1] + raw[start:cut])
            else:
                out.append((t, raw[start:cut]))
            start = cut
            i += 1
        pos = stop + 2


async def open_connection(ep: Endpoint, timeout_s: float = 30.0) -> Connection:
    loop = asyncio.get_running_loop()
    ctx = ssl_module.create_default_context() if ep.tls else None
    try:
        _, proto = await asyncio.wait_for(
            loop.create_connection(Connection, ep.host, ep.port, ssl=ctx), timeout_s)
    except (OSError, TimeoutError) as e:
        raise ConnectionError(f"cannot connect to {ep.host}:{ep.port}: {e}") from e
    return proto
