"""What one during-scrape costs the replay's event loop: parsing an engine's /metrics text.

Run: PYTHONPATH=src python benchmarks/scrape_parse.py [--repeat 50]
Baseline: prometheus_client's parser over the whole text, the samples kept afterwards (what
the scraper did until the H200 runs showed its ~13 ms once a second as event-loop lag).
New: parse_exposition(text, keep), which drops the unread lines before parsing."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kvbench.metrics import load_adapter, parse_exposition

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "metrics" / "golden"
CASES = {"vllm026_offload": "vllm", "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}


def _full_parse(text: str, keep: set[str]) -> dict:
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in keep and not math.isnan(s.value):
                out.setdefault(s.name, []).append([dict(s.labels), float(s.value)])
    return out


def _ms(fn, text: str, keep: set[str], repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn(text, keep)
    return (time.perf_counter() - t0) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    print(f"{'case':16} {'KB':>5} {'full ms':>8} {'kept ms':>8} {'speed-up':>8}")
    for case, engine in CASES.items():
        text = (GOLDEN / case / "post.prom").read_text()
        keep = load_adapter(engine).metric_names()
        assert parse_exposition(text, keep) == _full_parse(text, keep)
        full = _ms(_full_parse, text, keep, args.repeat)
        kept = _ms(parse_exposition, text, keep, args.repeat)
        print(f"{case:16} {len(text) / 1e3:5.0f} {full:8.2f} {kept:8.2f} {full / kept:7.1f}x")


if __name__ == "__main__":
    main()
