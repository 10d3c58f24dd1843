"""Completed responses are parsed (SSE, JSON, token split) by one task, one response per loop
iteration. When many streams end together (lanes started together stay in step), parsing them
all at once would hold back, by the whole burst, the timestamps of streams still reading; one
at a time, with the loop polling sockets in between, the hold-back is one response's parse."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from kvbench.replay.http import Response
from kvbench.replay.request import build_record


class Digest:
    def __init__(self, *, chat: bool, keep_text: bool) -> None:
        self.chat = chat
        self.keep_text = keep_text
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
                    rec = build_record(resp, chat=self.chat, keep_text=self.keep_text)
                except Exception as e:  # a response shape we did not foresee is a record too
                    rec = build_record(None, chat=self.chat, keep_text=False, error_kind="parse",
                                       error=f"cannot interpret the response: {e!r}")
                done(rec)
            finally:
                self._queue.task_done()
            await asyncio.sleep(0)
