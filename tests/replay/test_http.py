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


def test_reads_are_the_pairs_they_stand_for_without_a_tuple_each():
    """A body's reads are kept as two lists (no container per read for the collector to
    track) and read back as the (time, bytes) pairs: iteration, indexing from either end,
    slices, reversal, length, equality with the list of pairs."""
    import gc

    from kvbench.replay.reads import Reads

    pairs = [(10 + i, b"x" * i) for i in range(7)]
    reads = Reads(pairs)
    assert list(reads) == pairs and reads == pairs and reads == Reads(pairs)
    assert len(reads) == 7 and reads and not Reads()
    assert reads[0] == pairs[0] and reads[-1] == pairs[-1] and reads[2:5] == pairs[2:5]
    assert list(reversed(reads)) == pairs[::-1]
    assert reads != pairs[:-1] and reads != Reads(pairs[:-1])
    # what the collector visits: the two lists (and the class), whatever the reads
    assert {id(r) for r in gc.get_referents(reads)} - {id(Reads)} == \
        {id(reads.data), id(reads.times)}
    raw = _frame(b"data: a\n\n") + _frame(b"data: b\n\n") + b"0\r\n\r\n"
    got = _dechunk([(1, raw[:20]), (2, raw[20:])])
    assert isinstance(got, Reads) and not any(map(gc.is_tracked, got.data))
    assert got.times == [t for t, _ in got]
