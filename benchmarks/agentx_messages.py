"""agentx-harness 1.0.12's chat messages for Weka traces, as data: for each conversation its
loader builds (root, subagent chains, flat chains), each turn's messages as the harness sends
them (its `raw_messages` deltas accumulated, a `reset_context` turn starting over, as
`aiperf/endpoints/base_endpoint.py` `_flatten_turns` does), each message as its role and token
count. Run it with the harness's Python:

    ~/.cache/kvbench/agentx-harness-1.0.12/bin/python benchmarks/agentx_messages.py \\
        TRACE_DIR > OUT.json

The loader is driven as benchmarks/agentx_trees.py drives it (no server, no tokenizer): every
token decodes to the word "a", so a message's token count is its number of words; the
structure (roles, segment boundaries, counts) is the harness's own. Output: {trace: {conversation
id: ["s1024 u300", "s1024 u300 a64 u50", ...]}}, one string per turn, a message as its role's
initial and its tokens."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentx_trees import loader_for


def _count(content: str) -> int:
    return len(content.split())


def messages(directory: Path) -> dict:
    from aiperf.common.environment import Environment

    Environment.DATASET.WEKA_PARALLEL_WORKERS = 1  # the serial path, as agentx_trees.py
    loader = loader_for(directory)
    data = loader.load_dataset()
    loader._path = None
    out: dict = {}
    for conv in loader.convert_to_conversations(data):
        trace = conv.session_id.split("::")[0]
        wire: list[dict] = []
        turns = []
        for t in conv.turns:
            if t.reset_context:
                wire = []
            wire += t.raw_messages or []
            turns.append(" ".join(f"{m['role'][0]}{_count(m['content'])}" for m in wire))
        out.setdefault(trace, {})[conv.session_id] = turns
    return out


if __name__ == "__main__":
    json.dump(messages(Path(sys.argv[1])), sys.stdout, separators=(",", ":"))
