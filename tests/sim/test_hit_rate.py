"""Acceptance: with an unlimited GPU tier the simulated hit rate equals the theoretical
block-reuse rate of the trace, computed here independently with a plain trie."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from sim.conftest import MOONCAKE, MOONCAKE_SYNTHETIC

from kvbench.sim import SimSetup, load_traces, run


def _theoretical(rows_per_scope: list[tuple[int, list[tuple[int, list]]]]) -> tuple[int, int]:
    """rows_per_scope: (block size, [(input tokens, hash ids)] in time order) per id scope.
    Returns (reusable tokens, input tokens)."""
    hit = total = 0
    for block, rows in rows_per_scope:
        trie: dict = {}
        for n_in, ids in rows:
            node, matched = trie, 0
            for h in ids:
                if h not in node:
                    break
                node = node[h]
                matched += 1
            hit += min(n_in, block * matched)
            total += n_in
            node = trie
            for h in ids:
                node = node.setdefault(h, {})
    return hit, total


def _mooncake_rows(path) -> list:
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    rows.sort(key=lambda r: r["timestamp"])  # stable: equal times keep file order
    return [(512, [(r["input_length"], r["hash_ids"]) for r in rows])]


def _claude_rows(paths) -> list:
    out = []
    for p in paths:
        with gzip.open(p, "rt") as f:
            doc = json.load(f)
        reqs = sorted(doc["requests"], key=lambda r: r["t"])
        out.append((doc["block_size"], [(r["in"], r["hash_ids"]) for r in reqs]))
    return out


@pytest.mark.parametrize("path", [MOONCAKE, MOONCAKE_SYNTHETIC], ids=["conversation", "synthetic"])
def test_unlimited_gpu_hits_equal_theoretical_reuse_mooncake(path, costs):
    hit, total = _theoretical(_mooncake_rows(path))
    summary = run(load_traces([path]), costs, SimSetup(gpu_tokens=math.inf))
    assert summary["prompt_tokens"] == total
    assert summary["cached_tokens"]["total"] == hit
    assert summary["hit_rate"]["host"] == 0
    # The README of the data quotes ~36.6% block reuse for the conversation trace.
    assert 0.3 < summary["hit_rate"]["total"] < 0.8


def test_unlimited_gpu_hits_equal_theoretical_reuse_claude_code(claude_code_paths, costs):
    hit, total = _theoretical(_claude_rows(claude_code_paths))
    traces = load_traces(claude_code_paths)
    for setup in (SimSetup(gpu_tokens=math.inf), SimSetup(gpu_tokens=math.inf, concurrency=4)):
        summary = run(traces, costs, setup)
        assert summary["errors"] == 0
        assert summary["prompt_tokens"] == total
        assert summary["cached_tokens"]["total"] == hit, setup
    assert hit / total > 0.8  # agentic sessions re-send their whole history
