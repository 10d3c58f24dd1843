"""A completed stream's record is the contract the digest keeps, however the events are read:
fixed response bodies (the reference server's shape, vLLM's per-chunk usage, completions,
escaped and non-ASCII text, a repeated key, events after [DONE], broken shapes, CRLF, reads
split anywhere, a server's own clock) give the records kvbench's parser before the shape
fast path (main at 76ce9c3) gave, in `tests/data/replay/stream-records.json`; and a stream
of one shape is parsed as JSON a bounded number of times, whatever its length.

Regenerate (only when a record's content changes on purpose):
    PYTHONPATH=src python tests/replay/test_stream_records.py --write"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "replay" / "stream-records.json"


def _chat(rid: bytes, body: bytes, fin: bytes = b"null") -> bytes:
    return (b'data: {"id":"' + rid + b'","object":"chat.completion.chunk","created":1700000000,'
            b'"model":"m","choices":[{"index":0,' + body + b',"finish_reason":' + fin
            + b"}]}\n\n")


def _usage(n: int, extra: bytes = b"") -> bytes:
    return (b'data: {"id":"r","object":"chat.completion.chunk","created":1700000000,"model":"m",'
            b'"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d%s}}\n\n'
            % (n, extra))


WORDS = [b"alpha", b"be", b"\\u00e9t\\u00e9", b"caf\xc3\xa9", b"\xf0\x9f\x98\x80", b"a\\nb",
         b'say \\"hi\\"', b"x", b"tab\\tbed", b" spaced "]


def cases() -> dict[str, tuple[bytes, bool, bool]]:
    """name -> (body, chat, server clock)."""
    out: dict[str, tuple[bytes, bool, bool]] = {}
    content = [_chat(b"r", b'"delta":{"content":"' + WORDS[i % len(WORDS)] + b'"}')
               for i in range(40)]
    role = _chat(b"r", b'"delta":{"role":"assistant","content":""}')
    out["reference-server"] = (b"".join([role, *content[:1] * 30,
                                         _chat(b"r", b'"delta":{"content":"z"}', b'"length"'),
                                         _usage(31), b"data: [DONE]\n\n"]), True, False)
    out["mixed-text"] = (b"".join([role, *content, _usage(60), b"data: [DONE]\n\n"]), True,
                         False)
    out["empty-and-finish-with-text"] = (b"".join([
        content[0], _chat(b"r", b'"delta":{"content":""}'), content[1],
        _chat(b"r", b'"delta":{"content":"end"}', b'"stop"'), b"data: [DONE]\n\n"]), True,
        False)
    out["continuous-usage"] = (b"".join(
        b'data: {"id":"r","choices":[{"index":0,"delta":{"content":"w%d"},"finish_reason":null'
        b'}],"usage":{"prompt_tokens":7,"completion_tokens":%d}}\n\n' % (i, i + 1)
        for i in range(20)) + _usage(20) + b"data: [DONE]\n\n", True, False)
    out["ids-change"] = (b"".join(_chat(b"r%d" % (i // 5), b'"delta":{"content":"t"}')
                                  for i in range(20)) + b"data: [DONE]\n\n", True, False)
    out["repeated-key"] = (b"".join([content[0], *[
        _chat(b"r", b'"delta":{"content":"a","content":"bb%d"}' % i) for i in range(6)]]),
        True, False)
    out["after-done"] = (b"".join([*content[:3], b"data: [DONE]\n\n", *content[:3]]), True,
                         False)
    out["control-char-raw"] = (b"".join([*content[:3], _chat(b"r", b'"delta":{"content":"a\x01"}'),
                                         *content[:2]]), True, False)
    out["bad-utf8"] = (b"".join([*content[:3], _chat(b"r", b'"delta":{"content":"a\xff"}'),
                                 *content[:2]]), True, False)
    out["spaced-json"] = (b"".join(
        b'data: {"id": "r", "choices": [{"index": 0, "delta": {"content": "w %d", '
        b'"reasoning_content": null}, "finish_reason": null}]}\n\n' % i
        for i in range(12)) + b"data: [DONE]\n\n", True, False)
    out["reasoning-and-tools"] = (b"".join([
        content[0],
        *[_chat(b"r", b'"delta":{"reasoning_content":"think%d"}' % i) for i in range(4)],
        _chat(b"r", b'"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}'),
        *content[:3], b"data: [DONE]\n\n"]), True, False)
    out["second-choice"] = (b"".join([*content[:3], _chat(b"r", b'"delta":{"content":"q"}')
                                      .replace(b'"index":0', b'"index":1'), *content[:2]]), True,
                            False)
    out["server-error"] = (b"".join([*content[:3], b'data: {"error":{"message":"boom"}}\n\n']),
                           True, False)
    out["not-an-object"] = (b"".join([*content[:2], b"data: [1,2]\n\n", *content[:2]]), True,
                            False)
    out["comments-and-fields"] = (b"".join([b": ping\n\n", b"event: x\nid: 3\n" + content[0],
                                            *content[1:4], b"retry: 5\n\n"]), True, False)
    out["crlf"] = (b"".join(content[:6]).replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n",
                   True, False)
    out["unterminated"] = (b"".join(content[:4]) + content[4].rstrip(b"\n"), True, False)
    out["completions"] = (b"".join(
        b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"%s",'
        b'"logprobs":null,"finish_reason":%s}]}\n\n'
        % (WORDS[i % len(WORDS)], b'"length"' if i == 24 else b"null")
        for i in range(25)) + _usage(25) + b"data: [DONE]\n\n", False, False)
    out["server-clock"] = (b"".join(
        b'data: {"id":"r","choices":[{"index":0,"delta":{"content":"s"},"finish_reason":null}],'
        b'"kvbench_clock_ns":%d}\n\n' % (1000 + i) for i in range(8))
        + b'data: {"id":"r","choices":[{"index":0,"delta":{"content":"s"},'
          b'"finish_reason":null}]}\n\n' + b"data: [DONE]\n\n", True, True)
    return out


def _reads(body: bytes, split: str) -> list[tuple[int, bytes]]:
    """The body as timed reads: one an event, or cut every 7 bytes."""
    if split == "events":
        parts, start = [], 0
        while (end := body.find(b"\n\n", start)) >= 0:
            parts.append(body[start:end + 2])
            start = end + 2
        if start < len(body):
            parts.append(body[start:])
    else:
        parts = [body[i:i + 7] for i in range(0, len(body), 7)]
    return [(1000 * (i + 1), p) for i, p in enumerate(parts)]


def records() -> dict[str, dict]:
    from kvbench.replay.http import Response
    from kvbench.replay.request import build_record
    from kvbench.replay.stream import StreamResult, parse_stream_steps

    out = {}
    for name, (body, chat, clock) in cases().items():
        for split in ("events", "bytes"):
            for keep_text in (False, True):
                resp = Response(200, {"content-type": "text/event-stream"},
                                _reads(body, split), 1000)
                parsed = StreamResult(server_clock=clock)
                for _ in parse_stream_steps(parsed, resp, chat=chat, keep_text=keep_text,
                                            step_events=8):
                    pass
                rec = build_record(resp, chat=chat, keep_text=keep_text, parsed=parsed,
                                   server_clock=clock)
                rec["num_events"] = parsed.num_events
                out[f"{name}/{split}/{'text' if keep_text else 'no-text'}"] = rec
    return out


def test_records_equal_the_parser_before_the_shape_fast_path():
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(records()))
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key


def test_a_stream_of_one_shape_is_parsed_a_bounded_number_of_times(monkeypatch):
    """The reference server's 2,000-token answer: its role event, the first content event
    (the shape), the closing and the usage events are parsed; the rest are counted."""
    from kvbench.replay import stream
    from kvbench.replay.http import Response
    from kvbench.replay.request import build_record

    parsed: list[bytes] = []
    real = stream._loads
    monkeypatch.setattr(stream, "_loads", lambda data: parsed.append(data) or real(data))
    role = _chat(b"r", b'"delta":{"role":"assistant","content":" a"}')
    words = [_chat(b"r", b'"delta":{"content":" w%d"}' % i) for i in range(1998)]
    body = b"".join([role, *words, _chat(b"r", b'"delta":{"content":" z"}', b'"length"'),
                     _usage(2000), b"data: [DONE]\n\n"])
    rec = build_record(Response(200, {}, _reads(body, "events"), 1000), chat=True,
                       keep_text=False)
    assert rec["status"] == "ok" and len(rec["chunk_ns"]) == 2000
    assert rec["chunk_ns"] == [1000 * (i + 1) for i in range(2000)]
    assert len(parsed) == 4


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(records(), indent=1, sort_keys=True) + "\n")
