"""Whether a workload can fill a row: its lanes (enough sessions for the concurrency) and its
pools (a working set past the GPU pool). A session's KV at its largest is its longest prompt
plus that turn's output (a session's prefix only grows); `c` lanes hold at most the `c`
largest sessions at once. When that never exceeds the GPU pool, nothing is ever evicted and
a host tier cannot be hit, whatever the row: the prediction says +0% because the workload
cannot show an effect (issue 26). Each check is one line with the sessions it would take."""

from __future__ import annotations

from kvbench.workload.session import Session


def session_peak_tokens(session: Session) -> int:
    return max((t.input_tokens + t.output_tokens for t in session.turns), default=0)


def working_set_tokens(sessions: list[Session], concurrency: int) -> int:
    """The most KV `concurrency` lanes can hold at once: the largest sessions' peaks."""
    peaks = sorted((session_peak_tokens(s) for s in sessions), reverse=True)
    return sum(peaks[:max(concurrency, 0)])


def sessions_to_fill(sessions: list[Session], pool_tokens: int) -> int | None:
    """How many of the workload's largest sessions at once exceed the pool (None: not even
    all of them)."""
    total = 0
    for n, peak in enumerate(sorted((session_peak_tokens(s) for s in sessions), reverse=True),
                             1):
        total += peak
        if total > pool_tokens:
            return n
    return None


def fits_in_pool(sessions: list[Session], concurrency: int, pool_tokens: int) -> bool:
    return working_set_tokens(sessions, concurrency) <= pool_tokens


def pool_warning(what: str, sessions: list[Session], concurrency: int,
                 pool_tokens: int) -> str | None:
    """One line when the workload never fills the GPU pool at this concurrency (with the
    sessions at once it would take); None when it can."""
    ws = working_set_tokens(sessions, concurrency)
    if ws > pool_tokens:
        return None
    need = sessions_to_fill(sessions, pool_tokens)
    if need is not None:
        takes = f"filling it takes {need} of these sessions at once (conc >= {need})"
    else:
        takes = (f"all {len(sessions)} of its sessions at once do not: a larger workload "
                 "would (--trace agentx sizes one to the row)")
    return (f"warning: {what}: at conc {concurrency} the workload's working set is at most "
            f"{ws:,} KV tokens (its {min(concurrency, len(sessions))} largest sessions), within "
            f"the GPU pool of {pool_tokens:,}: nothing is evicted, so a host tier cannot be "
            f"hit and the offload effect shows as +0%; {takes}")


def lanes_warning(what: str, num_sessions: int, concurrency: int, recycle: bool) -> str | None:
    """One line when the workload has fewer sessions than the lanes, with the sessions it would
    need (issue 39: `simulate --concurrency 512` on 9 sessions said nothing); None when it has
    enough. Recycled, each extra lane replays a session again in a fresh hash namespace; not
    recycled, lanes without a session stay idle and the run measures fewer concurrent sessions
    than it is labelled with."""
    if num_sessions >= concurrency:
        return None
    head = f"warning: {what}: {concurrency} session lanes on {num_sessions} sessions: "
    if not recycle:
        return (head + f"only {num_sessions} lanes ever have a session, so this measures "
                f"{num_sessions} concurrent sessions, not {concurrency}: "
                f"{concurrency - num_sessions} lanes never start (--trace agentx sizes the "
                "corpus to the row; --max-requests or --duration recycles sessions)")
    return (head + f"{concurrency - num_sessions} lanes replay sessions again, each pass in a "
            f"fresh hash namespace (no pass hits another's cache); {concurrency} sessions "
            "would fill them (--trace agentx sizes the corpus to the row)")


def first_and_count(lines: list[str], what: str, shown: int = 3) -> list[str]:
    """The first `shown` lines in full, then how many more rows `what` (a recipe selection
    has hundreds of rows)."""
    out = lines[:shown]
    if len(lines) > shown:
        out.append(f"warning: {len(lines) - shown} more row(s) {what}")
    return out
