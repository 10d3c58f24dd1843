"""The sweep's live display: jobs done, the running job's phase, requests, tokens, errors and
elapsed time. Without a terminal it prints one line per event instead."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kvbench.sweep.events import JobOutcome

_STYLE = {"ok": "green", "failed": "red", "skipped": "dim"}


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _cells(c: dict[str, int]) -> tuple[str, str, str]:
    """requests done/sent, tokens in/out, errors (blank before the replay starts)."""
    if not c:
        return "", "", ""
    return (f"{c.get('done', 0)}/{c.get('sent', 0)}",
            f"{c.get('in_tokens', 0):,}/{c.get('out_tokens', 0):,}", str(c.get("errors", 0)))


class SweepDisplay:
    """Context manager; `job_events()` gives the JobEvents of the job now running."""

    def __init__(self, total: int, console: Console | None = None, *, live: bool | None = None):
        self.console = console or Console(stderr=True)
        self.total = total
        self.live_mode = self.console.is_terminal if live is None else live
        self.t0 = time.monotonic()
        self.finished: list[JobOutcome] = []
        self.current: str | None = None
        self.current_t0 = 0.0
        self.phase_name = "-"
        self.counters: dict[str, int] = {}
        self._live: Live | None = None

    # -- context ----------------------------------------------------------------------------
    def __enter__(self) -> SweepDisplay:
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)
            self._live = None

    # -- events -----------------------------------------------------------------------------
    def job_started(self, name: str) -> None:
        self.current, self.current_t0, self.phase_name, self.counters = (
            name, time.monotonic(), "start", {})
        self._refresh(f"[{self.position}/{self.total}] {name}: start")

    def phase(self, name: str) -> None:
        self.phase_name = name
        self._refresh(f"[{self.position}/{self.total}] {self.current}: {name}")

    def replay_progress(self, counters: Any, elapsed_s: float) -> None:
        self.counters = {k: int(getattr(counters, k, 0)) for k in
                         ("sent", "done", "errors", "in_tokens", "out_tokens", "inflight")}
        self._refresh(None)

    def job_finished(self, outcome: JobOutcome) -> None:
        if self.current == outcome.dir_name and self.counters:
            outcome.extra.setdefault("counters", dict(self.counters))
        self.finished.append(outcome)
        self.current = None
        why = f" at {outcome.phase}: {outcome.reason}" if outcome.status == "failed" else ""
        self._refresh(f"[{len(self.finished)}/{self.total}] {outcome.dir_name}: "
                      f"{outcome.status}{why} ({outcome.elapsed_s:.1f} s)", force=True)

    # -- drawing ----------------------------------------------------------------------------
    @property
    def position(self) -> int:
        return len(self.finished) + 1

    def _refresh(self, line: str | None, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(self._render())
        elif line is not None:
            self.console.print(line, highlight=False, markup=False)

    def _count(self, status: str) -> int:
        return sum(1 for o in self.finished if o.status == status)

    def _render(self) -> Group:
        head = Text.assemble(
            ("jobs ", "bold"), f"{len(self.finished)}/{self.total}  ",
            (f"ok {self._count('ok')}  ", "green"),
            (f"skipped {self._count('skipped')}  ", "dim"),
            (f"failed {self._count('failed')}  ", "red" if self._count("failed") else "dim"),
            f"elapsed {_clock(time.monotonic() - self.t0)}",
        )
        table = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("job", "phase", "requests", "tokens in/out", "errors", "elapsed"):
            table.add_column(col, justify="left" if col in ("job", "phase") else "right")
        for o in self.finished[-6:]:
            table.add_row(Text(o.dir_name, style=_STYLE.get(o.status, "")), o.status,
                          *_cells(o.extra.get("counters") or {}), _clock(o.elapsed_s))
        if self.current is not None:
            table.add_row(Text(self.current, style="bold"), self.phase_name,
                          *_cells(self.counters), _clock(time.monotonic() - self.current_t0))
        return Group(head, table)


class JobView:
    """The JobEvents of one job, forwarding to the display."""

    def __init__(self, display: SweepDisplay) -> None:
        self.display = display

    def phase(self, name: str) -> None:
        self.display.phase(name)

    def replay_progress(self, counters: Any, elapsed_s: float) -> None:
        self.display.replay_progress(counters, elapsed_s)
