"""The committed GPU runs (benchmarks/results/) keep their raw per-request and per-scrape files
gzip-compressed (issue 25 item 6), and every kvbench reader takes them as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kvbench.files import iter_jsonl

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
RAW = ("records.jsonl", "scrape.jsonl", "memory.jsonl")
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def test_raw_files_are_committed_compressed():
    plain = [p.relative_to(REPO) for name in RAW for p in RESULTS.rglob(name)]
    assert plain == [], f"gzip -n these (kvbench reads .gz transparently): {plain}"
    assert sum(1 for _ in RESULTS.rglob("records.jsonl.gz")) >= 20


def test_every_committed_record_file_reads_whole():
    for gz in RESULTS.rglob("records.jsonl.gz"):
        recs = list(iter_jsonl(gz.with_suffix("")))  # the plain name finds the .gz
        assert recs and all("status" in r for r in recs), gz


def test_report_builds_from_the_committed_runs(tmp_path):
    out = tmp_path / "report.html"
    runs = [str(RESULTS / "h200" / "vllm" / "runs"), str(RESULTS / "h200" / "sglang" / "runs")]
    proc = subprocess.run([sys.executable, "-m", "kvbench", "report", *runs, "-o", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 10_000 and "Traceback" not in proc.stderr
