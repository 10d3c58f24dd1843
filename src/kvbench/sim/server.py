"""`kvbench serve-sim`: the engine behind an OpenAI-compatible HTTP API with SGLang metrics.

Two clocks. `wall`: simulated time runs `time_scale` times faster than wall time: a step that
the cost model says takes 20 ms is delivered after 20 ms / time_scale of wall time.
`virtual`: simulated time moves only while no request that ended still owes the client's
answer (sim/lockstep.py), each event stamped with it. Timings the server reports itself (the
`sim_timing` field of each response, /metrics) are in simulated seconds. Each request gets
exactly `max_tokens` output tokens (as with `ignore_eos`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from kvbench.errors import shown
from kvbench.sim.cache import TieredCache
from kvbench.sim.context import context_error, over_context
from kvbench.sim.costs import CostModel
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.lockstep import (
    ARRIVAL_HEADER,
    CLOCK_HEADER,
    REQUEST_HEADER,
    RESOLVE_PATH,
    RUN_PATH,
    STAMP_FIELD,
    LaneError,
    Lockstep,
    Successor,
    successor_of,
)
from kvbench.sim.metrics import SimMetrics
from kvbench.sim.request import SimRequest
from kvbench.sim.tokens import Prompt, PromptTokens, chat_text, text_prompt, token_prompt

# The clock handshake: every response says how much faster than wall time this server's clock
# runs, so a client reports in the server's clock without being told (replay/clock.py).
TIME_SCALE_HEADER = "X-Kvbench-Time-Scale"
CLOCKS = ("wall", "virtual")
_WORDS = ("the", " cache", " page", " token", " host", " GPU", " tier", " hit", " load",
          " step", " batch", " block")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    served_model_name: str
    gpu_tokens: float
    host_tokens: int = 0
    page_tokens: int = 64
    write_policy: str = "write_through"
    time_scale: float = 1.0
    clock: str = "wall"  # CLOCKS
    seed: int = 0
    max_running_requests: int = 256
    chunked_prefill_tokens: int = 8192
    chars_per_token: int = 0  # 0: word tokens (see tokens.py)
    # a HuggingFace tokenizer (name or directory) that counts and keys prompts as the
    # engine would: two clients synthesising prompts with it are then measured alike
    tokenizer: str | None = None
    default_max_tokens: int = 128
    context_tokens: int | None = None  # max_model_len: longer prompt + max_tokens -> 400
    extra: dict = field(default_factory=dict)


def _check_messages(messages: list) -> None:
    """Each message an object with a string role and a string, null or text-part content
    (OpenAI's chat format); anything else is the client's error (400), never a 500."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _BadRequest(f"'messages[{i}]' must be an object, got {shown(m)}")
        if not isinstance(m.get("role", "user"), str):
            raise _BadRequest(f"'messages[{i}].role' must be a string")
        content = m.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list) or not all(
                isinstance(part, dict) and isinstance(part.get("text", ""), str)
                for part in content):
            raise _BadRequest(f"'messages[{i}].content' must be a string or a list of text "
                              f"parts, got {shown(content)}")


class _BadRequest(Exception):
    pass


class SimServer:
    def __init__(self, config: ServerConfig, costs: CostModel) -> None:
        self.config = config
        self.costs = costs
        self.cache = TieredCache(config.gpu_tokens, config.host_tokens, config.write_policy)
        self.engine = Engine(self.cache, costs, EngineConfig(
            max_running_requests=config.max_running_requests,
            chunked_prefill_tokens=config.chunked_prefill_tokens, fast_forward=False))
        self.metrics = SimMetrics(self)
        # an agent's turn repeats its conversation: its tokens are reused, not found again
        self.prompt_tokens = PromptTokens()
        self._ids = itertools.count()
        self._wake = asyncio.Event()
        self._t0 = time.perf_counter()
        self._task: asyncio.Task | None = None
        self._queues: set[asyncio.Queue] = set()
        self.failure: str | None = None
        self.cancelled = 0  # requests whose client disconnected
        self._transports: set[asyncio.Transport] = set()
        self._hf_tokenizer = None
        if config.tokenizer is not None:
            # loaded before the first request, whose time it would otherwise take
            from transformers import AutoTokenizer

            self._hf_tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        self.lockstep = Lockstep() if config.clock == "virtual" else None
        if self.lockstep is not None:
            self.engine.hold = self.lockstep.held

    # -- simulated clock and the engine task -----------------------------------------------
    def now_s(self) -> float:
        if self.lockstep is not None:
            return self.engine.now_s
        return (time.perf_counter() - self._t0) * self.config.time_scale

    async def _drive(self) -> None:
        try:
            await self._loop()
        except Exception as e:  # the engine is broken: say so to every caller, then stop
            self.failure = f"simulator failed: {e!r}"
            print(f"error: {self.failure}", file=sys.stderr, flush=True)
            for sink_queue in list(self._queues):
                sink_queue.put_nowait(("error", 0, 0.0))

    async def _loop(self) -> None:
        if self.lockstep is not None:
            return await self._loop_virtual(self.lockstep)
        while True:
            now = self.now_s()
            self.engine.run_until(now)
            nxt = self.engine.next_event_s()
            self._wake.clear()
            if nxt is None:
                await self._wake.wait()
                continue
            delay = (nxt - now) / self.config.time_scale
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
            else:
                await asyncio.sleep(0)

    async def _loop_virtual(self, lockstep: Lockstep) -> None:
        """Run the engine event by event while nothing is owed; a request or a resolve wakes
        it. Between events the loop yields, so the handlers stream what happened."""
        while True:
            self._wake.clear()
            nxt = None if lockstep.held() else self.engine.next_event_s()
            if nxt is None:
                await self._wake.wait()
                continue
            self.engine.run_until(nxt)
            await asyncio.sleep(0)

    async def start(self) -> None:
        self._t0 = time.perf_counter()
        self._task = asyncio.create_task(self._drive())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- requests --------------------------------------------------------------------------
    def _submit(self, prompt: Prompt, max_tokens: int,
                succ: Successor | None = None) -> tuple[SimRequest, asyncio.Queue]:
        queue: asyncio.Queue = asyncio.Queue()
        self._queues.add(queue)
        lockstep = self.lockstep if succ is not None else None

        def sink(req: SimRequest, event: str, n: int, t: float) -> None:
            if event == "first":
                self.metrics.on_prefill(req)
            elif event == "finish":
                self.metrics.on_finish(req)
            queue.put_nowait((event, n, t))
            if event in ("finish", "error"):
                self._queues.discard(queue)
                if lockstep is not None:  # the clock waits for what follows it
                    lockstep.ended(req.meta["request"], t)

        req = SimRequest(rid=next(self._ids), arrival_s=self.now_s(),
                         input_tokens=prompt.num_tokens, output_tokens=max_tokens,
                         keys=prompt.keys, page_tokens=self.config.page_tokens, sink=sink)
        if lockstep is not None:
            # it arrives when what it follows ended plus its delay (sim/lockstep.py)
            req.meta["request"] = f"r{req.rid}"
            req.arrival_s, req.meta["ticket"] = lockstep.arrive(
                succ, lambda at_s: self.engine.submit(req, at_s=at_s))
        else:
            self.engine.submit(req)
        self._wake.set()
        return req, queue

    def _text_prompt(self, text: str) -> Prompt:
        cfg = self.config
        if cfg.tokenizer is not None:
            return token_prompt(self._hf_tokenizer.encode(text, add_special_tokens=False),
                                cfg.page_tokens)
        if cfg.chars_per_token > 0:
            return text_prompt(text, cfg.page_tokens, cfg.chars_per_token)
        return self.prompt_tokens.prompt(text, cfg.page_tokens)

    def _parse(self, body: dict, chat: bool) -> tuple[Prompt, int, bool, bool]:
        cfg = self.config
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("'messages' must be a non-empty list")
            _check_messages(messages)
            prompt = self._text_prompt(chat_text(messages))
        else:
            raw = body.get("prompt")
            if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
                prompt = token_prompt(raw, cfg.page_tokens)
            elif isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
                prompt = self._text_prompt(raw[0])
            elif isinstance(raw, str):
                prompt = self._text_prompt(raw)
            else:
                raise _BadRequest("'prompt' must be a string or a list of token ids")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        max_tokens = cfg.default_max_tokens if max_tokens is None else max_tokens
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _BadRequest(f"'max_tokens' must be a positive integer, got "
                              f"{shown(max_tokens)}")
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise _BadRequest(f"'stream_options' must be an object, got {shown(options)}")
        include_usage = bool((options or {}).get("include_usage", True))
        return prompt, max_tokens, bool(body.get("stream", False)), include_usage

    def _words(self, rid: int, start: int, n: int) -> list[str]:
        base = rid * 7 + self.config.seed
        return [_WORDS[(base + i) % len(_WORDS)] for i in range(start, start + n)]

    def _usage(self, req: SimRequest) -> dict:
        return {"prompt_tokens": req.input_tokens, "completion_tokens": req.output_tokens,
                "total_tokens": req.input_tokens + req.output_tokens,
                "prompt_tokens_details": {"cached_tokens": req.cached_tokens}}

    def _timing(self, req: SimRequest) -> dict:
        return {"queue_s": req.admit_s - req.arrival_s, "ttft_s": req.ttft_s,
                "e2e_s": req.e2e_s, "cached_device_tokens": req.device_hit_tokens,
                "cached_host_tokens": req.host_hit_tokens}

    async def handle(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json(loads=orjson.loads)
            if not isinstance(body, dict):
                raise _BadRequest("the body must be a JSON object")
            prompt, max_tokens, stream, include_usage = self._parse(body, chat)
        except (_BadRequest, ValueError) as e:
            return _error(400, str(e))
        if self.failure:
            return _error(500, self.failure)
        try:
            succ = successor_of(request.headers) if self.lockstep is not None else None
        except LaneError as e:
            return _error(400, str(e))
        refused = self._refusal(prompt, max_tokens)
        if refused is not None:
            if succ is None:
                return _error(400, refused)
            return self._refused_in_step(succ, refused)
        try:
            req, queue = self._submit(prompt, max_tokens, succ)
        except LaneError as e:
            return _error(400, str(e))
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim{req.rid}"
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.config.served_model_name}
        transport = request.transport
        if transport is not None:
            self._transports.add(transport)
        try:
            if not stream:
                return await self._complete(req, queue, head, chat)
            return await self._stream(request, req, queue, head, chat, include_usage)
        except asyncio.CancelledError:  # the client went away (handler cancellation)
            self._abandon(req, queue)
            raise
        except ConnectionError:  # the client went away while we wrote: not a server error
            self._abandon(req, queue)
            return web.Response(status=499)
        finally:
            self._transports.discard(transport)

    def _refusal(self, prompt: Prompt, max_tokens: int) -> str | None:
        """Why the request is refused before the engine (a 400), or None."""
        need = (len(prompt.keys) * self.config.page_tokens + max(
            0, prompt.num_tokens - len(prompt.keys) * self.config.page_tokens) + max_tokens)
        if over_context(self.config.context_tokens, prompt.num_tokens, max_tokens):
            return context_error(self.config.context_tokens, prompt.num_tokens, max_tokens)
        if need > self.cache.device_capacity:
            return (f"the request needs {need} KV tokens (prompt {prompt.num_tokens} + "
                    f"max_tokens {max_tokens}); the GPU tier holds {self.cache.device_capacity}")
        return None

    def _refused_in_step(self, succ: Successor, message: str) -> web.Response:
        """A successor refused before the engine: it arrived (what it follows is answered)
        and ended at once, so the clock waits for what follows it in turn."""
        assert self.lockstep is not None
        rid = f"x{next(self._ids)}"
        try:
            arrival, _ = self.lockstep.arrive(succ, lambda at_s: None)
        except LaneError as e:
            return _error(400, str(e))
        self.lockstep.ended(rid, arrival)
        self._wake.set()
        resp = _error(400, message)
        resp.headers[REQUEST_HEADER] = rid
        resp.headers[ARRIVAL_HEADER] = str(round(arrival * 1e9))
        return resp

    def start_run(self, lanes: int) -> int:
        """A virtual-clock run begins (POST /kvbench/run): its lanes owe their first requests
        from now on; returns now, in simulated ns."""
        assert self.lockstep is not None
        self.lockstep.start_run(lanes, self.now_s())
        self._wake.set()
        return round(self.now_s() * 1e9)

    def resolve(self, after: str, count: int, skipped: int) -> None:
        assert self.lockstep is not None
        self.lockstep.resolve(after, count, skipped)
        self._wake.set()

    def close_streams(self) -> None:
        """Shutting down: drop every connection with a request in flight. A client that does
        not read would otherwise hold the server's writes (and SIGTERM) indefinitely."""
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()

    def _abandon(self, req: SimRequest, queue: asyncio.Queue) -> None:
        """Take a request whose client left out of the queue or the running set."""
        if self.lockstep is not None and "ticket" in req.meta and req.finish_s < 0 and \
                not self.lockstep.withdraw(req.meta["ticket"]):
            # in the engine: cancelled now, and what follows it is the client's to say
            self.lockstep.ended(req.meta["request"], self.now_s())
        self.engine.cancel(req)
        self._queues.discard(queue)
        self.cancelled += 1
        self._wake.set()

    async def _stream(self, request: web.Request, req: SimRequest, queue: asyncio.Queue,
                      head: dict, chat: bool, include_usage: bool) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        virtual = self.lockstep is not None
        if virtual:  # every event says when it happened in the engine's clock
            headers[ARRIVAL_HEADER] = str(round(req.arrival_s * 1e9))
            if "request" in req.meta:
                headers[REQUEST_HEADER] = req.meta["request"]
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        if chat:
            opening = {**head, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None}]}
            if virtual:
                opening[STAMP_FIELD] = round(req.arrival_s * 1e9)
            await _sse(resp, opening)
        sent = 0
        while True:
            event, n, t = await queue.get()
            if virtual:
                head = {**head, STAMP_FIELD: round(t * 1e9)}
            if event == "error":
                await _sse(resp, {"error": {"message": req.error or self.failure,
                                            "type": "server_error", "code": 500}})
                break
            for word in self._words(req.rid, sent, n):
                choice = {"index": 0, "delta": {"content": word}} if chat else {
                    "index": 0, "text": word}
                await _sse(resp, {**head, "choices": [{**choice, "finish_reason": None}]})
            sent += n
            if event == "finish":
                end = {"index": 0, "delta": {}} if chat else {"index": 0, "text": ""}
                await _sse(resp, {**head, "choices": [{**end, "finish_reason": "length"}]})
                if include_usage:
                    await _sse(resp, {**head, "choices": [], "usage": self._usage(req),
                                      "sim_timing": self._timing(req)})
                break
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _complete(self, req: SimRequest, queue: asyncio.Queue, head: dict,
                        chat: bool) -> web.Response:
        while True:
            event, _, _ = await queue.get()
            if event == "error":
                return _error(500, req.error or self.failure or "request failed")
            if event == "finish":
                break
        text = "".join(self._words(req.rid, 0, req.output_tokens))
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}}
                  if chat else {"index": 0, "text": text})
        body = {**head, "object": "chat.completion" if chat else "text_completion",
                "choices": [{**choice, "finish_reason": "length"}], "usage": self._usage(req),
                "sim_timing": self._timing(req)}
        return web.Response(body=orjson.dumps(body), content_type="application/json")


async def _sse(resp: web.StreamResponse, obj: dict) -> None:
    await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error" if status == 400
                      else "server_error", "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class _OneLine(logging.Formatter):
    """aiohttp logs a malformed request or a dropped connection with its traceback; for a
    server facing arbitrary clients that is noise: one line with the cause."""

    def format(self, record: logging.LogRecord) -> str:
        cause = f" ({record.exc_info[1]!r})" if record.exc_info and record.exc_info[1] else ""
        return f"{record.levelname.lower()}: {record.getMessage()}{cause}"


def quiet_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    for name in ("aiohttp.server", "aiohttp.web", "asyncio"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.propagate = False


def build_app(server: SimServer) -> web.Application:
    app = web.Application(client_max_size=256 * 1024 * 1024)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        data = {"object": "list", "data": [{"id": server.config.served_model_name,
                                            "object": "model", "owned_by": "kvbench-sim",
                                            "created": 0}]}
        return web.json_response(data)

    async def metrics(_: web.Request) -> web.Response:
        body, content_type = server.metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def advertise_clock(_: web.Request, response: web.StreamResponse) -> None:
        if server.lockstep is not None:
            response.headers[CLOCK_HEADER] = "virtual"
        else:
            response.headers[TIME_SCALE_HEADER] = repr(float(server.config.time_scale))

    async def control(request: web.Request, action) -> web.Response:
        """The virtual clock's control requests: a run's start, a successor not sent."""
        if server.lockstep is None:
            return _error(404, "this server's clock is not virtual")
        try:
            body = await request.json(loads=orjson.loads)
            if not isinstance(body, dict):
                raise LaneError("the body must be a JSON object")
            return web.json_response(action(body))
        except (LaneError, ValueError, KeyError, TypeError) as e:
            return _error(400, f"{request.path}: {e}")

    def _int(body: dict, key: str) -> int:
        v = body[key]
        if type(v) is not int:
            raise LaneError(f"{key!r} must be an integer, got {shown(v)}")
        return v

    async def run(request: web.Request) -> web.Response:
        return await control(request, lambda b: {
            "now_ns": server.start_run(_int(b, "lanes"))})

    async def resolve(request: web.Request) -> web.Response:
        def act(b: dict) -> dict:
            after = b["after"]
            if not isinstance(after, str):
                raise LaneError(f"'after' must be a request id, got {shown(after)}")
            server.resolve(after, _int(b, "count"), _int(b, "skipped"))
            return {"resolved": after}
        return await control(request, act)

    async def on_startup(_: web.Application) -> None:
        await server.start()

    async def on_shutdown(_: web.Application) -> None:
        server.close_streams()

    async def on_cleanup(_: web.Application) -> None:
        await server.stop()

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    async def chat(request: web.Request) -> web.StreamResponse:
        return await server.handle(request, chat=True)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await server.handle(request, chat=False)

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post(RUN_PATH, run)
    app.router.add_post(RESOLVE_PATH, resolve)
    app.on_response_prepare.append(advertise_clock)
    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app
