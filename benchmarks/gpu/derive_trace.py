"""Derive a bounded copy of kv-cache-tester traces for short GPU runs, so the real replay and
`kvbench simulate` read byte-identical inputs.

Each session keeps its turns up to the first whose prompt exceeds --max-input-tokens (prompts
only grow within a session), outputs are capped at --max-output-tokens and think times at
--max-think-s. Hash ids are untouched, so prefix reuse is exactly the trace's.

    python benchmarks/gpu/derive_trace.py SRC_DIR OUT_DIR --max-input-tokens 32768 \\
        --max-output-tokens 128 --max-think-s 2
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def derive(src: Path, out: Path, max_in: int, max_out: int, max_think_s: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    kept_sessions = kept_turns = total_turns = 0
    for path in sorted(src.glob("*.json.gz")):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        total_turns += len(doc["requests"])
        turns = []
        for r in doc["requests"]:
            if r.get("type", "n") != "n" or r["in"] > max_in:
                break
            turns.append({**r, "out": min(r["out"], max_out),
                          "think_time": min(r.get("think_time", 0.0), max_think_s)})
        if not turns:
            continue
        doc["requests"] = turns
        doc.pop("totals", None)
        with gzip.open(out / path.name, "wt") as f:
            json.dump(doc, f)
        kept_sessions += 1
        kept_turns += len(turns)
    return {"sessions": kept_sessions, "turns": kept_turns, "source_turns": total_turns}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-input-tokens", type=int, default=32768)
    ap.add_argument("--max-output-tokens", type=int, default=128)
    ap.add_argument("--max-think-s", type=float, default=2.0)
    a = ap.parse_args()
    print(derive(a.src, a.out, a.max_input_tokens, a.max_output_tokens, a.max_think_s))


if __name__ == "__main__":
    main()
