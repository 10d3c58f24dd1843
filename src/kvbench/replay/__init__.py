"""The replay client: closed-loop session lanes over a raw streaming HTTP/1.1 client, one SSE
parser, records.jsonl and summary.json. See docs/workload.md and docs/performance.md."""

from __future__ import annotations

from kvbench.replay.config import ReplayConfig
from kvbench.replay.runner import replay, run_replay
from kvbench.replay.stats import summarize

__all__ = ["ReplayConfig", "replay", "run_replay", "summarize"]
