"""Small Weka-format traces with parallel subagents, for replaying one workload with both
kvbench and agentx-harness (benchmarks/agentx_oracle.py, tests/replay/test_agentx_oracle.py).

Each trace is a root conversation whose prompt grows turn by turn, with recorded times
(`t`, `api_time`, `think_time` the end-to-start gap) and, after some root turns, a fan-out
of two or three subagents sharing the root's first blocks, each a short chain of its own,
ending before a later root turn (which joins them) or after the last one (background).
Every request extends its chain's previous one block for block, so agentx-harness's
hash-id chain detection (weka_trace.py `_detect_and_split_flat_chains`) finds one chain per
stream and both replayers see the same tree. The files follow the harness's schema
(aiperf/dataset/loader/weka_trace_models.py `WekaTrace`, extra="forbid").

    python3 benchmarks/agentx_traces.py OUT_DIR [--traces 4] [--seed 7] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BLOCK = 64
MODEL = "claude-opus-4-5-20251101"
SUB_MODEL = "claude-haiku-4-5-20251001"


def _chain(rng: random.Random, ids: list[int], next_id: list[int], t0: float, n: int,
           first_blocks: int, grow: tuple[int, int], model: str, scale: float
           ) -> tuple[list[dict], float]:
    """`n` requests, each the previous prompt plus a few blocks; returns them and the end
    of the last one."""
    out, t = [], t0
    blocks = list(ids)
    while len(blocks) < first_blocks:
        blocks.append(next_id[0])
        next_id[0] += 1
    for k in range(n):
        if k:
            for _ in range(rng.randint(*grow)):
                blocks.append(next_id[0])
                next_id[0] += 1
        api = round(rng.uniform(0.5, 2.0) * scale, 2)
        tail = rng.randint(1, BLOCK - 1)
        think = 0.0 if not k else round(rng.uniform(1.0, 4.0) * scale, 2)
        if k:
            t = round(t + think, 3)
        out.append({"t": t, "type": "n", "model": model, "in": len(blocks) * BLOCK + tail,
                    "out": rng.randint(8, 32), "hash_ids": list(blocks),
                    "api_time": api, "think_time": think})
        t = round(t + api, 3)
    return out, t


def trace(rng: random.Random, index: int, scale: float) -> dict:
    next_id = [1]
    system = list(range(next_id[0], next_id[0] + 4))
    next_id[0] += 4
    root, _ = _chain(rng, system, next_id, 0.0, 10 + rng.randint(0, 4), 8, (1, 3), MODEL,
                     scale)
    requests: list[dict] = []
    fan_after = sorted(rng.sample(range(1, len(root) - 2), 2))
    agent = 1
    for k, req in enumerate(root):
        requests.append(req)
        if k not in fan_after:
            continue
        spawn_t = round(req["t"] + req["api_time"] + 0.2 * scale, 3)
        for _ in range(rng.randint(2, 3)):
            sub, end = _chain(rng, system, next_id, round(spawn_t + rng.uniform(0, 0.5), 3),
                              rng.randint(2, 4), 6, (1, 2), SUB_MODEL, scale)
            requests.append({
                "t": spawn_t, "type": "subagent", "agent_id": f"agent_{agent:03d}",
                "subagent_type": "Explore", "duration_ms": int((end - spawn_t) * 1000),
                "status": "completed", "requests": sub, "models": [SUB_MODEL]})
            agent += 1
    if index % 2:  # a background subagent: no root turn follows it
        last = root[-1]
        spawn_t = round(last["t"] + last["api_time"] + 0.2 * scale, 3)
        sub, end = _chain(rng, system, next_id, spawn_t, 3, 6, (1, 2), SUB_MODEL, scale)
        requests.append({
            "t": spawn_t, "type": "subagent", "agent_id": f"agent_{agent:03d}",
            "subagent_type": "general-purpose", "duration_ms": int((end - spawn_t) * 1000),
            "status": "completed", "requests": sub, "models": [SUB_MODEL]})
    # the root turns after a fan-out start once its subagents are done, as recorded
    return {"id": f"oracle_{index:03d}", "models": [MODEL, SUB_MODEL], "block_size": BLOCK,
            "hash_id_scope": "local", "requests": _retime(requests, scale)}


def _retime(requests: list[dict], scale: float) -> list[dict]:
    """Move each root request after the subagents before it when they end later than it
    starts (their parent waits for them), keeping its recorded idle gap."""
    shift = 0.0
    last_root_end = 0.0
    pending_end = 0.0
    for req in requests:
        if req["type"] == "subagent":
            req["t"] = round(req["t"] + shift, 3)
            for sub in req["requests"]:
                sub["t"] = round(sub["t"] + shift, 3)
            pending_end = max(pending_end, req["t"] + req["duration_ms"] / 1000)
            continue
        t = round(req["t"] + shift, 3)
        if pending_end > t:
            shift += pending_end - t + 0.5 * scale
            t = round(req["t"] + shift, 3)
            pending_end = 0.0
        req["t"] = t
        if last_root_end:
            req["think_time"] = round(max(0.0, t - last_root_end), 3)
        last_root_end = t + req["api_time"]
    return requests


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--traces", type=int, default=4)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--scale", type=float, default=1.0, help="times are multiplied by this")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    for i in range(a.traces):
        (a.out / f"oracle_{i:03d}.json").write_text(json.dumps(trace(rng, i, a.scale)) + "\n")


if __name__ == "__main__":
    main()
