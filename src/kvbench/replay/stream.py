"""Turn a completed streamed response into the measured facts of one request: when each content
chunk arrived, how many tokens it carried, and the server's usage."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from kvbench.errors import shown
from kvbench.replay.http import Response
from kvbench.replay.lockstep import STAMP_FIELD
from kvbench.replay.sse import SseParser

_loads = orjson.loads  # (a name of this module's: tests count the events parsed)


@dataclass(slots=True)
class StreamResult:
    chunk_ns: list[int] = field(default_factory=list)
    chunk_chars: list[int] = field(default_factory=list)
    chunk_usage: list[int | None] = field(default_factory=list)  # cumulative completion tokens
    text: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    error_kind: str | None = None
    num_events: int = 0
    last_cum_tokens: int = 0
    continuous_usage: bool = False  # an event with choices carried usage
    t_usage_ns: int | None = None
    done: bool = False  # `data: [DONE]` arrived: the stream is over
    # a virtual-clock server (replay/lockstep.py): each event's time is the one it stamps
    server_clock: bool = False


def _delta_text(choice: dict, chat: bool) -> str | None:
    """The choice's text; "" when it carries a token whose text is not out yet (a partial UTF-8
    sequence under incremental detokenization, a special token); None when it carries none (a
    chat stream's role-only opening event, a usage-only or finish-only event)."""
    if not chat:
        text = choice.get("text")
        return text if isinstance(text, str) else None
    delta = choice.get("delta")
    if not delta or not isinstance(delta, dict):
        return None
    text = delta.get("content") or _other_delta(delta)
    if text:
        return text if isinstance(text, str) else orjson.dumps(text, default=str).decode()
    if "role" in delta or "content" not in delta:
        return None
    return ""


def parse_stream(resp: Response, *, chat: bool, keep_text: bool = False,
                 server_clock: bool = False) -> StreamResult:
    """Events are stamped with the arrival time of the read that completed them (with
    `server_clock`: the time the server stamped in each)."""
    res = StreamResult(server_clock=server_clock)
    for _ in parse_stream_steps(res, resp, chat=chat, keep_text=keep_text):
        pass
    return res


def parse_stream_steps(res: StreamResult, resp: Response, *, chat: bool, keep_text: bool,
                       step_events: int = 256) -> Iterator[None]:
    """`parse_stream` in steps of `step_events` events, so a caller on the event loop can yield
    between steps.

    A stream's content events are one JSON shape with a different string in it (the id, the
    model, `created` and the choice's other fields repeat), so an event whose bytes equal the
    last parsed content event's around its text (`Shape`) is that event with this text:
    counted without parsing it. Any other event is parsed as JSON and checked."""
    shape: Shape | None = None
    key = b'"content"' if chat else b'"text"'
    for i, (t, data) in enumerate(SseParser().feed_stamped(resp.pieces)):
        text = shape.text(data) if shape is not None and not res.done else None
        if text is not None:
            res.num_events += 1
            _chunk(res, t, text, None, keep_text)
        elif (obj := _event(res, t, data, chat, keep_text)) is not None:
            shape = Shape.of(data, obj, chat, key) or shape
        if i % step_events == step_events - 1:
            yield


# what ends a shape's text early (JSON escapes, control characters): such an event is parsed
_NOT_PLAIN = re.compile(rb'[\x00-\x1f\\"]')


@dataclass(frozen=True, slots=True)
class Shape:
    """A content event's bytes before (`head`, through the text's opening quote) and after
    (`tail`, from its closing quote) its text, taken from an event that was parsed and found
    to be one choice (index 0) with text, no finish reason, no usage: an event of the same
    head and tail whose text is plain (no escape, no control character, valid UTF-8) is
    the same JSON but for that text, and does what the parsed one did with its own text."""

    head: bytes
    tail: bytes

    @classmethod
    def of(cls, data: bytes, obj: dict, chat: bool, key: bytes) -> Shape | None:
        choices = obj.get("choices")
        if not (type(choices) is list and len(choices) == 1 and type(choices[0]) is dict):
            return None
        choice = choices[0]
        part = choice.get("delta") if chat else choice
        if type(part) is not dict or choice.get("index", 0) not in (0, None) or \
                choice.get("finish_reason") or obj.get("usage") or obj.get("error"):
            return None
        text = part.get("content" if chat else "text")
        if type(text) is not str or not text or data.count(key) != 1:
            return None  # (a repeated key: JSON's last one wins, the bytes' first is found)
        at = data.find(key) + len(key)
        while data[at:at + 1] in (b" ", b":"):
            at += 1
        if data[at:at + 1] != b'"':
            return None
        end = at + 1 + len(text.encode())
        if data[at + 1:end].decode("utf-8", "replace") != text or data[end:end + 1] != b'"':
            return None  # the text was escaped in the bytes: not plain
        return cls(data[:at + 1], data[end:])

    def text(self, data: bytes) -> str | None:
        """This event's text when it is of the shape with a plain text, else None."""
        head, tail = self.head, self.tail
        if not (data.startswith(head) and data.endswith(tail)):
            return None
        end = len(data) - len(tail)
        raw = data[len(head):end]
        if not raw or len(head) > end or _NOT_PLAIN.search(raw) is not None:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return None


def _bad(res: StreamResult, problem: str) -> None:
    """The stream contradicts the OpenAI streaming format: the request fails with the first
    such problem (`bad_event`); what it carried is never counted as tokens."""
    if res.error is None:
        res.error, res.error_kind = problem, "bad_event"


def _shape_problem(obj: dict, chat: bool) -> str | None:
    """Why an event's `choices` cannot be one streamed choice's (one was asked), or None."""
    choices = obj.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return f"choices is {shown(choices)}: not a list"
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return f"choices[{i}] is {shown(choice)}: not an object"
        index = choice.get("index", 0)
        if index not in (0, None):
            return f"choices[{i}] has index {shown(index)}: one choice was asked"
        part = choice.get("delta") if chat else choice
        if chat and part is not None and not isinstance(part, dict):
            return f"choices[{i}].delta is {shown(part)}: not an object"
        text = (part or {}).get("content" if chat else "text")
        if text is not None and not isinstance(text, str):
            return f"choices[{i}] text is {shown(text)}: not a string"
    return None


def _event(res: StreamResult, t: int, data: bytes, chat: bool, keep_text: bool
           ) -> dict | None:
    """Count one event; the JSON object it carried when it was one of the OpenAI streaming
    format (on a server's clock: never, each event's time is its own)."""
    res.num_events += 1
    if res.done:
        _bad(res, f"an event after [DONE]: {data[:80]!r}")
        return None
    if data == b"[DONE]":
        res.done = True
        return None
    try:
        obj = _loads(data)
    except orjson.JSONDecodeError:
        res.error, res.error_kind = f"unparsable SSE data {data[:80]!r}", "bad_event"
        return None
    if type(obj) is not dict:
        _bad(res, f"an event that is not a JSON object: {shown(obj)}")
        return None
    if (problem := _shape_problem(obj, chat)) is not None:
        _bad(res, problem)
        return None
    if res.server_clock:
        stamp = obj.get(STAMP_FIELD)
        if type(stamp) is int:
            t = stamp
        elif obj.get("choices") or obj.get("usage"):  # a token or usage at no known time
            res.error = f"an event without the server's {STAMP_FIELD} (virtual clock)"
            res.error_kind = "bad_event"
            return None
    choices = obj.get("choices")
    usage = obj.get("usage")
    text: str | None = None
    closing = False
    for choice in choices or ():
        piece = _delta_text(choice, chat)
        if piece is not None:
            text = piece if text is None else text + piece
        if choice.get("finish_reason"):
            res.finish_reason = choice["finish_reason"]
            closing = True
    if closing and text == "":
        text = None  # a closing event with no text carries no token of its own
    if obj.get("error") and not choices:
        err = obj["error"]
        res.error = (err.get("message") if isinstance(err, dict) else None) or str(err)[:300]
        res.error_kind = "server_error"
        return None
    cum = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(cum, int) or isinstance(cum, bool) or cum < 0:
        cum = None  # _usage names the bad value
    if cum is not None and choices:
        # Per-chunk usage (vLLM continuous_usage_stats) says exactly whether tokens came. A
        # closing event's usage is the total, which is per-chunk evidence only when earlier
        # events carried usage too.
        if not closing or res.continuous_usage:
            text = (text or "") if cum > res.last_cum_tokens else (text or None)
        res.continuous_usage = True
        res.last_cum_tokens = cum
    if text is not None:
        _chunk(res, t, text, cum, keep_text)
    if usage:
        _usage(res, usage)
        res.t_usage_ns = t
    return None if res.server_clock else obj


def _chunk(res: StreamResult, t: int, text: str, cum: int | None, keep_text: bool) -> None:
    """A content chunk: when it came, its characters, the usage it said (per-chunk usage)."""
    res.chunk_ns.append(t)
    res.chunk_chars.append(len(text))
    res.chunk_usage.append(cum)
    if keep_text:
        res.text.append(text)


def _other_delta(delta: dict) -> str:
    out = delta.get("reasoning_content") or delta.get("reasoning") or ""
    if not out and delta.get("tool_calls"):
        out = orjson.dumps(delta["tool_calls"]).decode()
    return out


def _count(res: StreamResult, key: str, value: object, old: int | None) -> int | None:
    """A usage count as the server sent it, when it can be one; otherwise the request fails
    with the reason (`bad_usage`) and the value is dropped, never summed."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value if value is not None else old
    res.error = f"impossible usage: {key} is {shown(value)}: not a count"
    res.error_kind = "bad_usage"
    return old


def _usage(res: StreamResult, usage: dict) -> None:
    if not isinstance(usage, dict):
        res.error, res.error_kind = f"impossible usage: {shown(usage)}", "bad_usage"
        return
    res.prompt_tokens = _count(res, "prompt_tokens", usage.get("prompt_tokens"),
                               res.prompt_tokens)
    res.completion_tokens = _count(res, "completion_tokens", usage.get("completion_tokens"),
                                   res.completion_tokens)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("cached_tokens")
    res.cached_tokens = _count(res, "cached_tokens", cached, res.cached_tokens)


def split_tokens(res: StreamResult) -> tuple[list[int], str]:
    """Tokens per content chunk and how they were known.

    Per-chunk cumulative usage (vLLM `continuous_usage_stats`) is exact. Otherwise, when the
    server's total exceeds the chunk count (speculative decoding, batched flushes), the extra
    tokens are spread in proportion to each chunk's characters (largest remainder), keeping
    the total equal to the server's."""
    n = len(res.chunk_ns)
    if not n:
        return [], "none"
    cum = res.chunk_usage
    if all(c is not None for c in cum):
        out, prev = [], 0
        for c in cum:
            out.append(max(0, c - prev))  # type: ignore[operator]
            prev = c  # type: ignore[assignment]
        return out, "usage"
    total = res.completion_tokens
    if total is None or total <= n:
        return [1] * n, "one_per_chunk"
    chars = res.chunk_chars
    whole = sum(chars) or n
    shares = [total * c / whole for c in chars]
    out = [max(1, int(s)) for s in shares]
    rest = total - sum(out)
    if rest > 0:
        order = sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)
        for k in range(rest):
            out[order[k % n]] += 1
    elif rest < 0:
        for i in sorted(range(n), key=lambda i: out[i], reverse=True):
            while rest < 0 and out[i] > 1:
                out[i] -= 1
                rest += 1
    return out, "estimated"
