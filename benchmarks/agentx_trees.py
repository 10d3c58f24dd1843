"""agentx-harness 1.0.12's own reconstruction of Weka traces, as data: for each trace, every
conversation the harness's loader builds (root, subagent chains, detected flat chains), each
turn's source request, recorded timestamp and end-to-start delay, each SPAWN branch (its
spawning turn, joining turn, children, start) and each turn's cross-stream predecessors
(`aiperf/dataset/loader/weka_trace.py` `convert_to_conversations` without its prompt text).
Run it with the harness's Python, which imports its loader:

    ~/.cache/kvbench/agentx-harness-1.0.12/bin/python benchmarks/agentx_trees.py \\
        TRACE_DIR > OUT.json

The loader is driven directly (no server, no tokenizer): its prompt synthesis is given a
stand-in that decodes every block to one token, which changes the prompt text only, not the
tree, the order or the timing that tests/workload/test_chains.py compares."""

from __future__ import annotations

import json
import sys
from pathlib import Path


class _Corpus:
    def set_trace_id(self, trace_id: str) -> None:
        pass


class _Prompts:
    """The parts of aiperf's PromptGenerator the loader touches."""

    def __init__(self) -> None:
        self._cache: dict = {}
        self._hash_id_corpus_rng = _Corpus()
        self._bpe_stable_terminator_tokens = [0]


def loader_for(directory: Path):
    from aiperf.dataset.loader._delay_cap import DelayCapTracker
    from aiperf.dataset.loader.weka_trace import WekaTraceLoader

    loader = object.__new__(WekaTraceLoader)
    loader._path = directory
    loader.prompt_generator = _Prompts()
    loader._configured_model_names = []
    loader._fixed_schedule_start_offset = loader._fixed_schedule_end_offset = None
    loader._max_isl = loader._max_osl = loader._max_context_length = None
    loader._user_block_size_override = None
    loader._block_size = 64
    loader._ignore_trace_delays = loader._use_think_time_only = False
    loader._inter_turn_delay_cap_seconds = None
    loader._delay_cap_tracker = DelayCapTracker(cap_seconds=None)
    loader._tool_shaped_messages = False
    loader._decode_block_tokens = lambda ids: [1] * (loader._block_size * len(ids))
    loader._decode_tokens_to_text = lambda tokens: " ".join("a" for _ in tokens)
    loader.sample_partial_tail_tokens = lambda n, seed: [1] * n
    return loader


def trees(directory: Path) -> dict:
    from aiperf.common.environment import Environment

    Environment.DATASET.WEKA_PARALLEL_WORKERS = 1  # the serial path (`_reconstruct_serial`)
    loader = loader_for(directory)
    data = loader.load_dataset()
    loader._path = None  # skip the max-context filter: none is set
    out: dict = {}

    def tokens(trace: str, outer: int, inner: int | None) -> int:
        req = data[trace][0].requests[outer]
        return (req if inner is None else req.requests[inner]).input_length

    for conv in loader.convert_to_conversations(data):
        trace = conv.session_id.split("::")[0]
        out.setdefault(trace, []).append({
            "id": conv.session_id,
            "turns": [{"outer": t.source_outer_idx, "inner": t.source_inner_idx,
                       "in": tokens(trace, t.source_outer_idx, t.source_inner_idx),
                       "t_ms": t.timestamp, "delay_ms": t.delay,
                       "spawns": list(t.branch_ids),
                       "joins": [p.branch_id for p in t.prerequisites],
                       "after": [[p.conversation_id, p.turn_index]
                                 for p in t.replay_predecessors]}
                      for t in conv.turns],
            "branches": [{"id": b.branch_id, "children": list(b.child_conversation_ids),
                          "background": b.is_background,
                          "start_ms": b.start_timestamp_ms} for b in conv.branches]})
    return out


if __name__ == "__main__":
    json.dump(trees(Path(sys.argv[1])), sys.stdout, separators=(",", ":"))
