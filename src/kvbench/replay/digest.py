"""Completed responses are parsed (SSE, JSON, token split) by one task, one response per loop
iteration. When many streams end together (lanes started together stay in step), parsing them
all at once would hold back, by the whole burst, the timestamps of streams still reading; one
at a time, with the loop polling sockets in between, the hold-back is one response's parse."""

from __future__ import annotations

import asyncio
import contextlib

from kvbench.replay.http import Response
from kvbench.replay.request import build_record


class Digest:
    def __init__(self, *, chat: bool, keep_text: bool) -> None:
        self.chat = chat
        self.keep_text = keep_text
        self._queue: asyncio.Queue[tuple[Response, asyncio.Future]] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def record(self, resp: Response) -> dict:
        fut = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((resp, fut))
        return await fut

    async def _run(self) -> None:
        while True:
            resp, fut = await self._queue.get()
            if not fut.done():
                try:
                    fut.set_result(build_record(resp, chat=self.chat, keep_text=self.keep_text))
                except Exception as e:  # surfaces in the lane that waits for this record
                    fut.set_exception(e)
            await asyncio.sleep(0)
