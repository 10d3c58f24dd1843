"""The live progress bar: requests, tokens and errors while a replay runs (rich, on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kvbench.replay.config import ReplayConfig
from kvbench.replay.lanes import Counters


class ProgressBar:
    def __init__(self, cfg: ReplayConfig) -> None:
        self.cfg = cfg
        self.total = cfg.duration_s or cfg.max_requests
        self._p = Progress(
            TextColumn("[bold]replay"), BarColumn(), TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(), console=Console(stderr=True), transient=False,
        )
        self._task = self._p.add_task("replay", total=self.total, stats="")

    def __enter__(self) -> ProgressBar:
        self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._p.stop()

    def update(self, c: Counters, elapsed_s: float) -> None:
        done = elapsed_s if self.cfg.duration_s else c.profiled_sent
        stats = (f"{c.done} requests ({c.inflight} in flight) · in {c.in_tokens:,} tok · "
                 f"out {c.out_tokens:,} tok · [red]{c.errors} errors[/]")
        self._p.update(self._task, completed=done, stats=stats)
