"""Incremental HTTP/1.1 chunked-transfer decoding, run on every read: a few operations per
read, so no response ever costs a burst of work when it ends, and every payload byte keeps the
arrival time of the read it came in."""

from __future__ import annotations

from collections.abc import Iterable

from kvbench.replay.reads import Reads

# hex digits of a frame size the one-frame read is looked for with (16 TB)
_SIZE_DIGITS = 10


class ChunkedDecoder:
    __slots__ = ("carry", "done", "failed", "need", "pieces", "skip", "trailer")

    def __init__(self) -> None:
        self.pieces = Reads()
        self.need = 0  # payload bytes still to come in the current frame
        self.skip = 0  # CRLF bytes after a payload still to skip
        self.carry = b""  # a size line split across reads
        self.trailer: bytes | None = None  # set once the last (size 0) chunk is seen
        self.done = False
        self.failed = False

    def feed(self, t: int, data: bytes) -> bool:
        """Consume one read; True once the body is complete."""
        if self.trailer is not None:
            return self._trailer(data)
        if not (self.need or self.skip or self.carry):
            # the common read: one whole frame (a server flushes an event at a time)
            eol = data.find(b"\r\n")
            if 0 < eol <= _SIZE_DIGITS and data[-2:] == b"\r\n":
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0  # (a chunk extension, or garbage: the general path says)
                if size > 0 and len(data) == eol + size + 4:
                    self.pieces.add(t, data[eol + 2:eol + 2 + size])
                    return False
        if self.carry:
            data, self.carry = self.carry + data, b""
        n = len(data)
        pos = 0
        got: list[bytes] = []
        while pos < n:
            need = self.need
            if need:
                take = need if need <= n - pos else n - pos
                got.append(data[pos:pos + take] if take < n else data)
                pos += take
                self.need = need - take
                if not self.need:
                    self.skip = 2
                continue
            if self.skip:
                step = self.skip if self.skip <= n - pos else n - pos
                pos += step
                self.skip -= step
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self.carry = data[pos:]
                break
            try:
                size = int(data[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                self.failed = self.done = True
                break
            pos = eol + 2
            if size == 0:
                self.trailer = b""
                self._add(t, got)
                return self._trailer(data[pos:])
            self.need = size
        self._add(t, got)
        return self.done

    def _add(self, t: int, got: list[bytes]) -> None:
        if got:
            self.pieces.add(t, got[0] if len(got) == 1 else b"".join(got))

    def _trailer(self, data: bytes) -> bool:
        # after the last chunk: optional trailer lines, then an empty line
        buf = (self.trailer or b"") + data
        self.trailer = buf
        if buf.startswith(b"\r\n") or b"\r\n\r\n" in buf:
            self.done = True
        return self.done


def dechunk(reads: Iterable[tuple[int, bytes]]) -> Reads | None:
    """The pieces of a complete chunked body given as timed reads; None if incomplete."""
    dec = ChunkedDecoder()
    for t, data in reads:
        if dec.feed(t, data):
            break
    return dec.pieces if dec.done and not dec.failed else None
