"""One request from a session lane: the HTTP bytes out, the record in."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import orjson

from kvbench.errors import ReplayOptionError, shown
from kvbench.replay.config import ReplayConfig
from kvbench.replay.http import Endpoint, Response
from kvbench.replay.overflow import CONTEXT_OVERFLOW, is_context_overflow
from kvbench.replay.stream import StreamResult, parse_stream, split_tokens
from kvbench.workload.prompt import PromptJson

# fields some servers reject (HTTP 400/422); dropped once for the whole run if they do
OPTIONAL_FIELDS = ("ignore_eos", "stream_options")
# Where the prompt goes in a body: the body is serialised around it and the prompt's pieces
# joined in its place, so a 100K-token context is never a Python string nor escaped again.
PROMPT_SLOT = "\x00kvbench:prompt\x00"
_SLOT_JSON = orjson.dumps(PROMPT_SLOT)
# a prompt that is a whole message list (`PromptJson.messages`) takes the one message's place
_MESSAGE_SLOT_JSON = orjson.dumps([{"role": "user", "content": PROMPT_SLOT}])


class RequestFactory:
    def __init__(self, cfg: ReplayConfig, ep: Endpoint) -> None:
        self.cfg = cfg
        self.ep = ep
        self.chat = cfg.endpoint == "chat"
        self.dropped: set[str] = set()
        head = [f"POST {ep.base_path}{cfg.path} HTTP/1.1", f"Host: {ep.host_header}",
                "User-Agent: kvbench-replay", "Accept: text/event-stream",
                "Content-Type: application/json"]
        if cfg.api_key:
            head.append(f"Authorization: Bearer {cfg.api_key}")
        self._head = "\r\n".join(head)
        if _SLOT_JSON in orjson.dumps(cfg.extra_body):
            raise ReplayOptionError(f"extra_body holds {PROMPT_SLOT!r}, the text kvbench "
                                    "marks the prompt's place with")

    def body(self, max_tokens: int) -> dict:
        """The request's JSON body, the prompt at `PROMPT_SLOT` (filled in by `encode`)."""
        cfg = self.cfg
        body: dict = {"model": cfg.model, "max_tokens": max_tokens, "stream": True}
        if self.chat:
            body["messages"] = [{"role": "user", "content": PROMPT_SLOT}]
        else:
            body["prompt"] = PROMPT_SLOT
        if cfg.include_usage and "stream_options" not in self.dropped:
            opts = {"include_usage": True}
            if cfg.continuous_usage:
                opts["continuous_usage_stats"] = True
            body["stream_options"] = opts
        if cfg.ignore_eos and "ignore_eos" not in self.dropped:
            body["ignore_eos"] = True
        body.update(cfg.extra_body)
        return body

    def encode(self, body: dict, session_key: str, prompt: PromptJson,
               extra_headers: str = "") -> Iterator[bytes]:
        """The request's bytes in pieces, `prompt` in its slot; `extra_headers`: more header
        lines, each after a CRLF. The pieces are written as they are (`writelines`): a 5 MB
        prompt is never joined into one body, which took a loop pass 1.6-2.4 ms against
        0.7-0.9 ms for its 12K pieces written by uvloop 0.23's writev. An iterator, not a
        list: the request holds what it wrote while in flight, and a list of 12K pieces would
        be walked by every young collection of the garbage collector meanwhile (one took
        27 ms)."""
        payload = orjson.dumps(body)
        before, slot, after = payload.partition(
            _MESSAGE_SLOT_JSON if prompt.messages else _SLOT_JSON)
        head = self._head + extra_headers
        if self.cfg.correlation_header:
            head += f"\r\n{self.cfg.correlation_header}: {session_key}"
        if not slot:
            return iter((f"{head}\r\nContent-Length: {len(payload)}\r\n\r\n".encode(),
                         payload))
        length = len(before) + prompt.num_bytes + len(after)
        return chain((f"{head}\r\nContent-Length: {length}\r\n\r\n".encode(), before),
                     prompt.pieces, (after,))

    def rejected_fields(self, resp: Response, body: dict) -> list[str]:
        """Optional fields a 400/422 answer names (the request is then resent without them)."""
        if resp.status not in (400, 422):
            return []
        text = resp.body()[:2000].decode("utf-8", "replace")
        named = [f for f in OPTIONAL_FIELDS if f in body and f in text]
        if not named and "nexpected field" in text:  # names nothing we recognise: drop all
            named = [f for f in OPTIONAL_FIELDS if f in body]
        return named


def build_record(resp: Response | None, *, chat: bool, keep_text: bool, error: str | None = None,
                 error_kind: str | None = None, parsed: StreamResult | None = None,
                 server_clock: bool = False) -> dict:
    """The measured part of a record (the lane adds ids, times and the prompt facts).
    `parsed` is the stream already parsed (by the digest, in steps)."""
    rec: dict = {"t_first_ns": None, "t_last_ns": None, "chunk_ns": [], "chunk_tokens": [],
                 "chunk_tokens_source": "none", "prompt_tokens": None, "completion_tokens": None,
                 "cached_tokens": None, "http_status": None, "finish_reason": None,
                 "status": "error", "error": error, "error_kind": error_kind}
    if resp is None:
        return rec
    rec["http_status"] = resp.status or None
    if resp.error_kind is not None:  # the response itself broke a bound (replay/http.py)
        rec["error"], rec["error_kind"] = resp.error, resp.error_kind
        return rec
    if resp.status != 200:
        text = resp.body()[:500].decode("utf-8", "replace")
        rec["error"] = resp.error or f"HTTP {resp.status}: {text}"
        rec["error_kind"] = (CONTEXT_OVERFLOW if resp.status and is_context_overflow(text)
                             else f"http_{resp.status}" if resp.status else "transport")
        return rec
    if resp.error and not resp.pieces:  # nothing was kept to parse (a runaway body, dropped)
        rec["error"], rec["error_kind"] = resp.error, "too_large"
        return rec
    kind = resp.headers.get("content-type", "")
    if "json" in kind.lower() or (resp.pieces and "event-stream" in kind.lower() and (
            resp.pieces[0][1].lstrip()[:1] in (b"{", b"["))):
        # a whole JSON body where a stream was asked (under its own type, or labelled as
        # an event stream): no event of it is a streamed token
        rec["error"] = f"a JSON body (Content-Type {shown(kind)}) where an event stream was asked"
        rec["error_kind"] = "not_a_stream"
        return rec
    res = parsed if parsed is not None else parse_stream(resp, chat=chat, keep_text=keep_text,
                                                         server_clock=server_clock)
    if not res.chunk_ns and res.completion_tokens and res.t_usage_ns is not None:
        # tokens the server counted but streamed in no event of their own: they arrived, at
        # the latest, with the usage event
        res.chunk_ns.append(res.t_usage_ns)
        res.chunk_chars.append(0)
        res.chunk_usage.append(res.completion_tokens)
    toks, source = split_tokens(res)
    rec.update({
        "t_first_ns": res.chunk_ns[0] if res.chunk_ns else None,
        "t_last_ns": res.chunk_ns[-1] if res.chunk_ns else None,
        "chunk_ns": res.chunk_ns, "chunk_tokens": toks, "chunk_tokens_source": source,
        "prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
        "cached_tokens": res.cached_tokens, "finish_reason": res.finish_reason,
    })
    if keep_text:
        rec["text"] = "".join(res.text)
    if resp.error:
        rec["error"], rec["error_kind"] = resp.error, "incomplete"
    elif res.error:
        rec["error"], rec["error_kind"] = res.error, res.error_kind
    elif not res.chunk_ns:
        rec["error"], rec["error_kind"] = "stream carried no token and no usage tokens", "empty"
    else:
        rec["status"] = "ok"
    return rec


def mark_impossible_usage(rec: dict) -> dict:
    """A response whose usage cannot be true (a count that is negative or not an integer,
    more cached than prompt tokens, more completion tokens than `max_tokens` asked for) is a
    failed request (`bad_usage`) with the reason: its numbers would poison every statistic.
    `rec` is the whole record (the lane's `max_tokens` with the measured part)."""
    if rec.get("status") != "ok":
        return rec
    problem = None
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        v = rec.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            problem = f"usage {key} is {shown(v)}: not a count"
            rec[key] = None  # never summed or averaged
            break
    else:
        prompt, cached = rec.get("prompt_tokens"), rec.get("cached_tokens")
        done, cap = rec.get("completion_tokens"), rec.get("max_tokens")
        streamed = len(rec.get("chunk_ns") or ())  # events that carried a token each
        if prompt is not None and cached is not None and cached > prompt:
            problem = f"usage cached_tokens {cached} > prompt_tokens {prompt}"
        elif done is not None and cap is not None and done > cap:
            problem = f"usage completion_tokens {done} > max_tokens {cap} requested"
        elif prompt == 0:
            problem = "usage prompt_tokens 0: every request sent a prompt"
        elif prompt is None and done is not None:
            problem = "usage gives completion_tokens but no prompt_tokens"
        elif done is not None and done < streamed:
            problem = f"usage completion_tokens {done} < the {streamed} tokens streamed"
    if problem is not None:
        rec.update(status="error", error=f"impossible usage: {problem}", error_kind="bad_usage")
    return rec
