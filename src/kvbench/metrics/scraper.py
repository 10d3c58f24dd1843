"""Scrapes an engine's /metrics before, periodically during, and after a run into
scrape.jsonl. A failing endpoint is recorded as a failed snapshot, never raised."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from kvbench.bounds import MAX_LABEL_CHARS
from kvbench.errors import MetricsError
from kvbench.files import JsonlWriter
from kvbench.metrics.adapter import load_adapter
from kvbench.metrics.exposition import MAX_EXPOSITION_BYTES, parse_exposition
from kvbench.metrics.window import PROFILING_START
from kvbench.redaction import REDACTED, is_secret_name, redact_text

REQUEST_TIMEOUT_S = 5.0


class Scraper:
    """`await start()` takes the `pre` snapshot and begins `during` snapshots every
    `interval_s`; `await stop()` takes the `post` snapshot and closes the file.

    Pre and post snapshots, and the one at a warm-up's end (`mark_profiling_start`), keep
    every sample (for diagnosis and every counter's baseline); during snapshots keep only the
    samples the engine's adapter reads, so an hour-long run stays a few MB."""

    def __init__(self, metrics_url: str, engine: str, out_path: Path,
                 interval_s: float = 1.0) -> None:
        if interval_s <= 0:
            raise MetricsError(f"scrape interval_s must be > 0, got {interval_s}")
        self.metrics_url = metrics_url
        self.engine = engine
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self._keep = load_adapter(engine).metric_names()
        self._writer: JsonlWriter | None = None
        self._session = None
        self._task: asyncio.Task | None = None
        self.num_ok = 0
        self.num_failed = 0
        self.write_error: str | None = None

    async def start(self) -> None:
        import aiohttp

        self._writer = JsonlWriter(self.out_path)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
        await self.snapshot("pre")
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            if self._session is not None:
                await self.snapshot("post")
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None
            if self._writer is not None:
                try:
                    self._writer.close()
                except OSError as e:
                    self.write_error = self.write_error or f"{e.strerror or e}"
                self._writer = None

    async def mark_profiling_start(self) -> None:
        """A snapshot at the end of a warm-up, just before the profiling phase: the baseline
        its counters are counted from (metrics/window.py)."""
        if self._session is not None:
            await self.snapshot(PROFILING_START)

    async def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while True:
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
            next_t += self.interval_s
            await self.snapshot("during")

    async def snapshot(self, phase: str) -> dict:
        """Fetch, parse and append one snapshot; returns it."""
        t_ns = time.time_ns()
        record: dict = {"phase": phase, "t_ns": t_ns, "ok": False, "error": None,
                        "samples": {}}
        try:
            async with self._session.get(self.metrics_url) as resp:
                if resp.status != 200:
                    raise MetricsError(f"HTTP {resp.status}")
                raw = bytearray()
                async for piece in resp.content.iter_chunked(1 << 16):
                    raw += piece
                    if len(raw) > MAX_EXPOSITION_BYTES:
                        raise MetricsError(f"/metrics answer past {MAX_EXPOSITION_BYTES:,} "
                                           "bytes")
                text = bytes(raw).decode(resp.charset or "utf-8", "replace")
            # every sample where a window starts or ends (metrics/window.py, aiperf.py)
            keep = None if phase in ("pre", "post", PROFILING_START) else self._keep
            # labels are the server's text (a launch argument, a URL): redacted like a log
            record["samples"] = _redacted(parse_exposition(text, keep))
            record["ok"] = True
            self.num_ok += 1
        except Exception as e:  # any failure of a scrape is data, never a crash of the run
            record["error"] = redact_text(f"{type(e).__name__}: {e}"[:300]) or type(e).__name__
            self.num_failed += 1
        record["fetch_ms"] = (time.time_ns() - t_ns) / 1e6
        if self._writer is not None:
            try:
                self._writer.write(record)
            except OSError as e:  # a full disk: stop writing snapshots, never the run
                self.write_error = self.write_error or f"{e.strerror or e}"
                self._writer = None
        return record

    async def __aenter__(self) -> Scraper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _redacted(samples: dict) -> dict:
    """Label values are the server's text (a launch argument, a URL, a key): a label named
    like a secret is hidden, every other value redacted by shape, as a log line is."""
    for series in samples.values():
        for sample in series:
            labels = sample[0] if sample and isinstance(sample[0], dict) else None
            for name, value in (labels or {}).items():
                value = REDACTED if is_secret_name(name) else redact_text(value)
                if len(value) > MAX_LABEL_CHARS:  # kept bounded (kvbench/bounds.py)
                    value = value[:MAX_LABEL_CHARS] + f"... ({len(value):,} characters)"
                labels[name] = value
    return samples
