"""Completed responses are parsed (SSE, JSON, token split) by one task, one response per loop
iteration, a long one in steps of 256 events. When many streams end together (lanes started
together stay in step), parsing them all at once would hold back, by the whole burst, the
timestamps of streams still reading; this way the loop polls sockets between steps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from kvbench.replay.http import Response
from kvbench.replay.request import build_record
from kvbench.replay.stream import StreamResult, parse_stream_steps


class Digest:
    def __init__(self, *, chat: bool, keep_text: bool, server_clock: bool = False) -> None:
        self.chat = chat
        self.keep_text = keep_text
        self.server_clock = server_clock
        self._queue: asyncio.Queue[tuple[Response, Callable[[dict], None]]] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def submit(self, resp: Response, done: Callable[[dict], None]) -> None:
        """Queue a completed response; `done(record)` is called once it is parsed."""
        self._queue.put_nowait((resp, done))

    async def drain(self) -> None:
        """Parse everything still queued (the end of a run), then stop the task."""
        await self._queue.join()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            resp, done = await self._queue.get()
            try:
                try:
                    parsed = None
                    if resp.status == 200 and resp.pieces:
                        parsed = StreamResult(server_clock=self.server_clock)
                        for _ in parse_stream_steps(parsed, resp, chat=self.chat,
                                                    keep_text=self.keep_text):
                            await asyncio.sleep(0)
                    rec = build_record(resp, chat=self.chat, keep_text=self.keep_text,
                                       parsed=parsed, server_clock=self.server_clock)
                except Exception as e:  # a response shape we did not foresee is a record too
                    rec = build_record(None, chat=self.chat, keep_text=False, error_kind="parse",
                                       error=f"cannot interpret the response: {e!r}")
                done(rec)
            finally:
                self._queue.task_done()
            await asyncio.sleep(0)
