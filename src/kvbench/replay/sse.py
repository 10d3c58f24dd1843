"""The one Server-Sent-Events parser. It is fed body pieces as they arrived and returns the
`data` of each event completed by that piece, so every event can be stamped with the arrival
time of the read that completed it. Lines may end in LF, CRLF or CR, split anywhere."""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.replay.reads import Reads


class SseParser:
    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the previous piece ended in CR: a following LF belongs to it

    def feed(self, data: bytes) -> list[bytes]:
        """The data fields (joined by LF when several) of the events this piece completes."""
        if self._cr:
            self._cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            if data[-1:] == b"\r":
                self._cr = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        events: list[bytes] = []
        start = 0
        find = buf.find
        while True:
            end = find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            start = end + 2
            if block[:5] == b"data:" and b"\n" not in block:
                events.append(block[6:] if block[5:6] == b" " else block[5:])
            elif block:
                parsed = _parse_block(block)
                if parsed is not None:
                    events.append(parsed)
        self._buf = buf[start:] if start < len(buf) else b""
        return events

    def feed_stamped(self, pieces: Sequence[tuple[int, bytes]]) -> Reads:
        """All events of a complete body given as (arrival ns, bytes) pieces, each event with
        the time of the piece holding its last byte. Equivalent to `feed` per piece, but one
        pass over the joined body when it has no CR (the common case)."""
        out = Reads()
        add = out.add
        if len(pieces) == 1 or any(b"\r" in p for _, p in pieces) or self._buf or self._cr:
            for t, piece in pieces:
                for d in self.feed(piece):
                    add(t, d)
            if pieces:
                for d in self.flush():
                    add(pieces[-1][0], d)
            return out
        times = [t for t, _ in pieces]
        body = b"".join(p for _, p in pieces)
        k, piece_end = 0, len(pieces[0][1])
        find = body.find
        start = 0
        while True:
            end = find(b"\n\n", start)
            if end < 0:
                break
            while end + 2 > piece_end:  # the event's last byte is in a later piece
                k += 1
                piece_end += len(pieces[k][1])
            block = body[start:end]
            start = end + 2
            if block[:5] == b"data:" and b"\n" not in block:
                add(times[k], block[6:] if block[5:6] == b" " else block[5:])
            elif block:
                parsed = _parse_block(block)
                if parsed is not None:
                    add(times[k], parsed)
        self._buf = body[start:]
        for d in self.flush():
            add(times[-1], d)
        return out

    def flush(self) -> list[bytes]:
        """An unterminated event left at the end of a stream (servers that omit the blank line)."""
        rest, self._buf = self._buf, b""
        parsed = _parse_block(rest.rstrip(b"\n")) if rest.strip() else None
        return [parsed] if parsed is not None else []


def _parse_block(block: bytes) -> bytes | None:
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        # comments (":"), "event", "id" and "retry" fields carry nothing we measure
    return b"\n".join(data) if data else None
