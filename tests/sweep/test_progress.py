"""The sweep display: live table on a terminal, one line per event otherwise."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from kvbench.sweep.events import JobOutcome
from kvbench.sweep.progress import SweepDisplay


def test_live_table_shows_jobs_phase_requests_tokens_errors():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=140, color_system=None)
    display = SweepDisplay(3, console, live=True)
    with display:
        display.job_finished(JobOutcome("a_conc2", "skipped", elapsed_s=0.0))
        display.job_started("b_conc4")
        display.phase("replay")
        display.replay_progress(SimpleNamespace(sent=12, done=10, errors=1, in_tokens=123456,
                                                out_tokens=7890, inflight=2), 3.0)
        console.print(display._render())  # the frame Live shows now
    out = buf.getvalue()
    assert "jobs 1/3" in out and "skipped 1" in out
    assert "b_conc4" in out and "replay" in out
    assert "10/12" in out and "123,456/7,890" in out


def test_plain_lines_without_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    display = SweepDisplay(2, console)
    with display:
        display.job_started("a")
        display.phase("ready")
        display.job_finished(JobOutcome("a", "failed", phase="ready", reason="boom",
                                        elapsed_s=1.25))
    lines = buf.getvalue().splitlines()
    assert lines == ["[1/2] a: start", "[1/2] a: ready", "[1/2] a: failed at ready: boom (1.2 s)"]


def test_finished_jobs_keep_their_final_counts():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=140, color_system=None)
    display = SweepDisplay(1, console, live=True)
    display.job_started("a")
    display.replay_progress(SimpleNamespace(sent=5, done=5, errors=0, in_tokens=1000,
                                            out_tokens=50, inflight=0), 1.0)
    display.job_finished(JobOutcome("a", "ok", elapsed_s=2.0))
    console.print(display._render())
    assert "5/5" in buf.getvalue() and "1,000/50" in buf.getvalue()
