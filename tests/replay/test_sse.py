from __future__ import annotations

from kvbench.replay.sse import SseParser

STREAM = (
    b'data: {"a":1}\n\n'
    b": keep-alive comment\n\n"
    b'event: message\nid: 7\ndata: {"b":2}\n\n'
    b"data: line1\ndata: line2\n\n"
    b'data:{"nospace":true}\r\n\r\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a":1}', b'{"b":2}', b"line1\nline2", b'{"nospace":true}', b"[DONE]"]


def _feed_all(pieces: list[bytes]) -> list[bytes]:
    p = SseParser()
    out = []
    for piece in pieces:
        out.extend(p.feed(piece))
    return out + p.flush()


def test_whole_stream_in_one_read_gives_every_event():
    assert _feed_all([STREAM]) == EXPECTED


def test_split_at_every_byte_boundary():
    for cut in range(1, len(STREAM)):
        assert _feed_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_one_byte_at_a_time():
    assert _feed_all([STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    p = SseParser()
    # a lone CR already ends the blank line, so the event is complete ...
    assert p.feed(b"data: x\r\n\r") == [b"x"]
    # ... and the LF that follows belongs to that CR: it must not start a new line
    assert p.feed(b"\ndata: y\r\r") == [b"y"]  # bare CR line ends are legal too
    assert p.feed(b"data: z\n\n") == [b"z"]


def test_events_completed_by_a_read_are_returned_by_that_read():
    p = SseParser()
    assert p.feed(b'data: 1\n\ndata: 2\n\ndata: 3') == [b"1", b"2"]
    assert p.feed(b"\n\n") == [b"3"]


def test_unterminated_final_event_is_flushed():
    p = SseParser()
    assert p.feed(b"data: last\n") == []
    assert p.flush() == [b"last"]


def test_feed_stamped_matches_feed_per_piece_at_every_split():
    for crlf in (False, True):
        stream = STREAM if crlf else STREAM.replace(b"\r\n", b"\n")
        for a in range(1, len(stream) - 1, 3):
            for b in range(a + 1, len(stream), 5):
                pieces = [(1, stream[:a]), (2, stream[a:b]), (3, stream[b:])]
                ref = SseParser()
                want = [(t, d) for t, p in pieces for d in ref.feed(p)]
                want += [(3, d) for d in ref.flush()]
                assert SseParser().feed_stamped(pieces) == want, (a, b)
