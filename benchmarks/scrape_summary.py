"""How long summarize_scrape takes on an hour-long run scraped every second, per engine.

Run: PYTHONPATH=src python benchmarks/scrape_summary.py [--seconds 3600]
Writes a synthetic scrape.jsonl (the golden pre/during/post text, during repeated) to a temp
dir and prints file size and summarize time; the baseline is reading the file alone."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fixtures.scrapes import golden_snapshots

from kvbench.files import JsonlWriter, read_jsonl
from kvbench.metrics import load_adapter, summarize_scrape


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=3600)
    args = ap.parse_args()
    print(f"{'engine':8} {'snapshots':>9} {'MB':>6} {'read s':>7} {'summarize s':>11} "
          f"{'ratio':>6}")
    for engine in ("sglang", "vllm", "trtllm"):
        snaps = golden_snapshots(engine, step_s=1.0, during_repeats=args.seconds)
        keep = load_adapter(engine).metric_names()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scrape.jsonl"
            with JsonlWriter(path) as w:
                for s in snaps:
                    if s["phase"] == "during":
                        s = {**s, "samples": {k: v for k, v in s["samples"].items()
                                              if k in keep}}
                    w.write(s)
            t0 = time.perf_counter()
            read_jsonl(path)
            t_read = time.perf_counter() - t0
            t0 = time.perf_counter()
            summarize_scrape(path, engine)
            t_sum = time.perf_counter() - t0
            print(f"{engine:8} {len(snaps):9d} {path.stat().st_size / 1e6:6.1f} "
                  f"{t_read:7.2f} {t_sum:11.2f} {t_sum / t_read:6.1f}")


if __name__ == "__main__":
    main()
