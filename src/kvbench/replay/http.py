"""A minimal HTTP/1.1 client connection for streaming responses, on asyncio's Protocol API.

The read path takes `perf_counter_ns()` first, then only undoes the chunked framing (a few
operations per read, see chunked.py); SSE and JSON are parsed after the response completes,
off the read path. There is no line-length limit and no fixed read buffer to outgrow, so
100K-token contexts and huge SSE lines cost nothing extra."""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from urllib.parse import urlsplit

from kvbench.bounds import PORT
from kvbench.errors import ReplayOptionError, shown
from kvbench.replay.chunked import ChunkedDecoder
from kvbench.replay.reads import Reads

RCVBUF_BYTES = 4 << 20
# The replay's connections go to the server directly, never through an http_proxy; so do its
# one-off probes (/v1/models, the clock's handshake), or a proxy in the environment would
# stand between kvbench and the server it measures for those alone.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Idle time after which a kept-alive connection is not reused when the server advertises no
# `Keep-Alive: timeout=N`: below the 5 s that uvicorn, aiohttp and nginx-style servers close
# idle connections at, so the client never writes into a connection the server is closing.
DEFAULT_IDLE_S = 4.0
# One response's bytes are kept until it completes (to be timed and parsed); past this it is
# a per-request error. The longest legitimate stream (32K tokens of ~200-byte SSE chunks) is
# about 6 MiB.
MAX_RESPONSE_BYTES = 64 << 20
# Margin kept below an advertised keep-alive timeout (the server's timer and ours are not one).
IDLE_MARGIN_S = 0.5
UNANSWERED = "connection closed before a response"
# A response head is a few hundred bytes; CPython's http.client refuses more than 100 header
# lines (`_MAXHEADERS`, Lib/http/client.py) and lines past 64 KiB (`_MAXLINE`): a head past
# either is a misbehaving server's, a per-request error.
MAX_HEADERS = 100
MAX_HEAD_BYTES = 64 << 10
# A stream that keeps sending bytes (SSE comments, keep-alives) and no event for this long
# is stalled: a per-request error (`stalled`), not a wait until the request timeout. A server
# that sends nothing at all (a long prefill) is not stalled; the request timeout bounds it.
KEEPALIVE_ONLY_S = 60.0
STALLED = "stalled"
BAD_RESPONSE = "bad_response"


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    pieces: Sequence[tuple[int, bytes]]  # (arrival ns, body bytes) per read, dechunked
    # (a `Reads` from a connection)
    t_first_byte_ns: int
    complete: bool = True
    error: str | None = None
    # what kind of failure `error` is when the transport itself failed mid-response
    # (`stalled`, `bad_response`); None: too large (the one kind before these)
    error_kind: str | None = None
    # closed by the server before a single response byte: the server never answered (on a
    # reused keep-alive connection, it closed it as we wrote), so resending is safe
    unanswered: bool = False

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
        try:  # "http://[::1" and a port of 99999 are ValueErrors of urllib's own
            parts = urlsplit(url)
            port_given = parts.port
        except ValueError as e:
            raise ReplayOptionError(f"url {shown(url)}: {e}",
                                    hint="e.g. --url http://127.0.0.1:8000") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ReplayOptionError(
                f"url {shown(url)} is not an http(s) URL",
                hint="e.g. --url http://127.0.0.1:8000",
            )
        tls = parts.scheme == "https"
        port = port_given if port_given is not None else (443 if tls else 80)
        PORT.check(port, f"url {shown(url)}: port", ReplayOptionError)
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[:-3]
        return cls(parts.hostname, port, tls, path, f"{parts.hostname}:{port}")


class Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time (a session lane owns it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # responses completed on this connection
        self.idle_since_ns = 0
        self.keepalive_s: float | None = None  # what the server advertised, if anything
        self._waiter: asyncio.Future | None = None
        self._reset()

    def stale(self, now_ns: int) -> bool:
        """Whether a reused connection sat idle long enough that the server may be closing it:
        then a fresh one is opened before sending, rather than racing the server's close."""
        if not self.served:
            return False
        limit = DEFAULT_IDLE_S
        if self.keepalive_s is not None:
            limit = min(limit, max(0.0, self.keepalive_s - IDLE_MARGIN_S))
        return (now_ns - self.idle_since_ns) / 1e9 >= limit

    def _reset(self) -> None:
        self._events = 0  # reads that carried an SSE data line (keep-alive watch)
        self._head_bytes = 0
        self._error_kind: str | None = None
        self._head_buf = b""
        self._t_first = 0
        self._status = 0
        self._headers: dict[str, str] = {}
        self._mode = ""  # "" (head pending) | "chunked" | "length" | "eof"
        self._chunked: ChunkedDecoder | None = None
        self._pieces = Reads()
        self._length = 0
        self._got = 0
        self._error: str | None = None
        self._received = 0

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
        t = perf_counter_ns()
        self._received += len(data)
        if self._received > MAX_RESPONSE_BYTES and self._waiter is not None:
            # a runaway body (a 400 MB event with no newline) is this request's error, not
            # the client's memory: stop reading it and drop the connection
            self._error = f"response larger than {MAX_RESPONSE_BYTES >> 20} MiB"
            self._chunked = None
            self._finish("done")
            return
        if b"data:" in data:
            self._events += 1
        dec = self._chunked
        if dec is not None:
            if dec.feed(t, data):
                self._finish("done")
            return
        if self._waiter is None:
            return
        if self._mode == "length":
            self._pieces.add(t, data)
            self._got += len(data)
            if self._got >= self._length:
                self._finish("done")
        elif self._mode == "eof":
            self._pieces.add(t, data)
        else:
            self._head(t, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish("eof")

    # --- internals ---
    def _head(self, t: int, data: bytes) -> None:
        if not self._t_first:
            self._t_first = t
        buf = self._head_buf + data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self._head_buf = buf
            if len(buf) > MAX_HEAD_BYTES:
                self._bad(f"response head past {MAX_HEAD_BYTES >> 10} KiB with no end")
            return
        lines_n = buf.count(b"\r\n", 0, end)
        if end > MAX_HEAD_BYTES or lines_n > MAX_HEADERS:
            self._bad(f"response head of {end:,} bytes, {lines_n:,} lines (at most "
                      f"{MAX_HEADERS} headers in {MAX_HEAD_BYTES >> 10} KiB)")
            return
        self._head_bytes = self._received - (len(buf) - end - 4)
        lines = buf[:end].decode("latin-1").split("\r\n")
        try:
            self._status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._error = f"bad status line {lines[0][:80]!r}"
            self._finish("done")
            return
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self._headers[k.strip().lower()] = v.strip()
        rest = buf[end + 4:]
        if "chunked" in self._headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
            self._chunked = ChunkedDecoder()
            if rest and self._chunked.feed(t, rest):
                self._finish("done")
        elif "content-length" in self._headers:
            length = self._headers["content-length"]
            if not (length.isascii() and length.isdigit()) or len(length) > 12:
                self._bad(f"Content-Length {shown(length)} is not a byte count")
                return
            self._mode, self._length = "length", int(length)
            if rest:
                self._pieces.add(t, rest)
            self._got = len(rest)
            if self._got >= self._length:
                self._finish("done")
        else:
            self._mode = "eof"
            if rest:
                self._pieces.add(t, rest)

    def _bad(self, error: str, kind: str = BAD_RESPONSE) -> None:
        self._error, self._error_kind = error, kind
        self._finish("done")

    def _watch_keepalive(self, received: int, events: int) -> None:
        """Every KEEPALIVE_ONLY_S of a request: a stream that sent bytes since the last look
        and no event is stalled."""
        if self._waiter is None or self._waiter.done():
            return
        body = self._received - self._head_bytes if self._mode else 0
        if body > received and self._events == events:
            self._bad(f"the stream sent {body - received:,} bytes of keep-alive and no event "
                      f"in {KEEPALIVE_ONLY_S:g} s", STALLED)
            return
        self._watch = asyncio.get_running_loop().call_later(
            KEEPALIVE_ONLY_S, self._watch_keepalive, body, self._events)

    def _finish(self, why: str) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(why)

    # --- API ---
    async def request(self, raw: Iterable[bytes]) -> tuple[int, Response]:
        """Send one request (its bytes in pieces); return (send ns, response). A transport
        failure is a Response with `error` set (a per-request failure is a record, not an
        exception)."""
        assert self.transport is not None
        self._reset()
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._watch = loop.call_later(KEEPALIVE_ONLY_S, self._watch_keepalive, 0, 0)
        t_send = perf_counter_ns()
        self.transport.writelines(raw)
        try:
            why = await self._waiter
        finally:
            self._waiter = None
            self._watch.cancel()
        resp = self._response(why)
        self._chunked = None
        if resp.complete:
            self.served += 1
            self.idle_since_ns = perf_counter_ns()
            self.keepalive_s = _keepalive_timeout(resp.headers.get("keep-alive", ""))
        return t_send, resp

    def _response(self, why: str) -> Response:
        if self._error is not None:
            self.close()
            return Response(self._status, self._headers, [], self._t_first, False, self._error,
                            error_kind=self._error_kind)
        if not self._mode:
            unanswered = why == "eof" and not self._t_first
            err = UNANSWERED if why == "eof" else why
            return Response(0, {}, [], 0, complete=False, error=err, unanswered=unanswered)
        dec = self._chunked
        pieces = dec.pieces if dec is not None else self._pieces
        complete = why == "done" or self._mode == "eof"
        error = None
        if dec is not None and (dec.failed or not dec.done):
            complete, error = False, "stream ended before the final chunk"
        elif self._mode == "length" and self._got < self._length:
            complete, error = False, "body shorter than Content-Length"
        if self._headers.get("connection", "").lower() == "close" or self._mode == "eof" or \
                not complete:
            self.close()
        return Response(self._status, self._headers, pieces, self._t_first, complete, error)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _keepalive_timeout(value: str) -> float | None:
    """`timeout=N` from a Keep-Alive header (RFC 2068 §19.7.1), None when absent or bad."""
    for part in value.split(","):
        k, _, v = part.strip().partition("=")
        if k.strip().lower() == "timeout":
            try:
                return float(v.strip())
            except ValueError:
                return None
    return None


async def open_connection(ep: Endpoint, timeout_s: float = 30.0) -> Connection:
    loop = asyncio.get_running_loop()
    ctx = ssl_module.create_default_context() if ep.tls else None
    try:
        _, proto = await asyncio.wait_for(
            loop.create_connection(Connection, ep.host, ep.port, ssl=ctx), timeout_s)
    except (OSError, TimeoutError) as e:
        raise ConnectionError(f"cannot connect to {ep.host}:{ep.port}: {e}") from e
    return proto
