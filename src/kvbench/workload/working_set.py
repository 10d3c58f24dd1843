"""How much KV a workload can hold at once: the working set at a concurrency, and the scale
that makes a synthetic workload's working set a stated multiple of a GPU pool. A session's
KV at its largest is its longest prompt plus that turn's output (a session's prefix only
grows); `c` lanes hold at most the `c` largest sessions at once. When that never exceeds the
GPU pool, nothing is ever evicted and a host tier cannot be hit, whatever the row: the
prediction says +0% because the workload cannot show an effect (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.workload.session import Session
from kvbench.workload.synthetic import SyntheticSpec, generate_sessions


def session_peak_tokens(session: Session) -> int:
    return max((t.input_tokens + t.output_tokens for t in session.turns), default=0)


def working_set_tokens(sessions: list[Session], concurrency: int) -> int:
    """The most KV `concurrency` lanes can hold at once: the largest sessions' peaks."""
    peaks = sorted((session_peak_tokens(s) for s in sessions), reverse=True)
    return sum(peaks[:max(concurrency, 0)])


@dataclass(frozen=True, slots=True)
class SizedWorkload:
    """A synthetic workload whose working set at `concurrency` is `multiple` x the pool."""

    sessions: int
    scale: float
    working_set_tokens: int
    multiple: float

    def options(self) -> str:
        return f"--synthetic-sessions {self.sessions} --synthetic-scale {self.scale:.3g}"


def fits_in_pool(sessions: list[Session], concurrency: int, pool_tokens: int) -> bool:
    return working_set_tokens(sessions, concurrency) <= pool_tokens


def sized_to_pool(concurrency: int, pool_tokens: int, multiple: float = 2.0,
                  seed: int = 0) -> SizedWorkload:
    """Synthetic agentic sessions (one per lane, at least 8) scaled so that the working set
    at `concurrency` is `multiple` x `pool_tokens` (token counts scale linearly)."""
    n = max(concurrency, 8)
    base = working_set_tokens(generate_sessions(SyntheticSpec(num_sessions=n, seed=seed)),
                              concurrency)
    scale = multiple * pool_tokens / base if base else 1.0
    sized = generate_sessions(SyntheticSpec(num_sessions=n, seed=seed, scale=scale))
    ws = working_set_tokens(sized, concurrency)
    return SizedWorkload(n, scale, ws, ws / pool_tokens if pool_tokens else 0.0)


def pool_warning(what: str, sessions: list[Session], concurrency: int,
                 pool_tokens: int) -> str | None:
    """One line when the workload never fills the pool at this concurrency, with the sized
    alternative; None when it can."""
    ws = working_set_tokens(sessions, concurrency)
    if ws > pool_tokens:
        return None
    sized = sized_to_pool(concurrency, pool_tokens)
    return (f"warning: {what}: the workload's working set at conc {concurrency} is at most "
            f"{ws:,} KV tokens (its {min(concurrency, len(sessions))} largest sessions), "
            f"within the GPU pool of {pool_tokens:,}: nothing is evicted, so a host tier "
            f"cannot be hit and the offload effect shows as +0%. A workload sized to the row: "
            f"{sized.sessions} synthetic agentic sessions with token counts x{sized.scale:.3g}, "
            f"working set {sized.working_set_tokens:,} tokens = {sized.multiple:.1f}x the pool "
            f"(kvbench capacity {sized.options()})")


def pool_warnings(sessions: list[Session], rows: list[tuple[str, int, int]],
                  shown: int = 3) -> list[str]:
    """`pool_warning` for (label, concurrency, GPU pool tokens) rows: the first `shown` in
    full, then a count of the others (a recipe selection has hundreds of rows)."""
    lines, more = [], 0
    for label, conc, pool in rows:
        if fits_in_pool(sessions, conc, pool):
            if len(lines) < shown:
                lines.append(pool_warning(label, sessions, conc, pool))
            else:
                more += 1
    if more:
        lines.append(f"warning: {more} more row(s) whose GPU pool the workload never fills")
    return lines
