"""Hand-built agentic workloads whose capacity is known by construction."""

from __future__ import annotations

import json
from pathlib import Path

PAGE = 64
CONTEXT_PAGES = 128  # every turn of a session sends the same 8,192-token context
CONTEXT_TOKENS = PAGE * CONTEXT_PAGES


def write_sessions(directory: Path, sessions: int, turns: int = 20, think_s: float = 5.0,
                   out_tokens: int = 2, context_pages: int = CONTEXT_PAGES) -> Path:
    """One kv-cache-tester file per session; each session re-sends its own context (ids are
    scoped per file, so sessions share nothing). The first turn of a session misses (1 in
    `turns`, under the 10 % a p90 ignores), every later turn hits while the session's
    context (`context_pages` pages of 64 tokens) stays cached."""
    directory.mkdir(parents=True, exist_ok=True)
    for s in range(sessions):
        # no recorded `t`: the loader takes each gap from think_time (a recorded t would
        # define it, as the harness does: workload/weka.py _stream_gaps)
        requests = [{"in": PAGE * context_pages, "out": out_tokens,
                     "hash_ids": list(range(context_pages)),
                     "think_time": think_s if k else 0.0} for k in range(turns)]
        (directory / f"session_{s:03d}.json").write_text(
            json.dumps({"id": f"s{s}", "block_size": PAGE, "requests": requests}))
    return directory
