from __future__ import annotations

from kvbench.replay.chunked import dechunk as _dechunk
from kvbench.replay.http import Endpoint


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def test_dechunk_keeps_each_byte_with_its_read_time():
    raw = _frame(b"data: a\n\n") + _frame(b"data: b\n\n") + b"0\r\n\r\n"
    for cut in range(1, len(raw)):
        pieces = _dechunk([(1, raw[:cut]), (2, raw[cut:])])
        assert pieces is not None
        assert b"".join(p for _, p in pieces) == b"data: a\n\ndata: b\n\n"
        # bytes before the cut carry time 1, after it time 2
        body_before = sum(len(p) for t, p in pieces if t == 1)
        assert all(t in (1, 2) for t, _ in pieces)
        assert body_before <= cut


def test_dechunk_incomplete_body_is_none():
    raw = _frame(b"data: a\n\n") + b"0\r\n"
    assert _dechunk([(1, raw)]) is None
    assert _dechunk([(1, _frame(b"data: a\n\n")[:-3])]) is None


def test_endpoint_parse_strips_v1_and_defaults_port():
    ep = Endpoint.parse("http://localhost/v1/")
    assert (ep.host, ep.port, ep.base_path, ep.tls) == ("localhost", 80, "", False)
    assert Endpoint.parse("https://h:8443/prefix").base_path == "/prefix"


def test_dechunk_one_byte_reads_keep_event_completion_times():
    from kvbench.replay.sse import SseParser

    raw = _frame(b"data: a\n\n") + _frame(b"data: bb\n\ndata: c\n\n") + b"0\r\n\r\n"
    reads = [(i, raw[i:i + 1]) for i in range(len(raw))]
    pieces = _dechunk(reads)
    assert pieces is not None
    events = SseParser().feed_stamped(pieces)
    assert [d for _, d in events] == [b"a", b"bb", b"c"]
    # each event is stamped with the read that carried its final newline
    for (t, d), needle in zip(events, (b"a\n\n", b"bb\n\n", b"c\n\n"), strict=True):
        assert raw[t] == ord("\n") and raw[t - len(needle) + 1:t + 1] == needle, d
