"""Long runs in constant memory (issue 27, item 9): the summary streams records.jsonl instead
of reading it whole, and records and scrapes may be gzip-compressed, read by the one reader
(files.iter_jsonl) that the replay, the scrape summary and rescore share."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from fixtures.results_data import write_records

from kvbench.files import JsonlWriter, iter_jsonl, jsonl_path, read_jsonl
from kvbench.replay import ReplayConfig, run_replay, summarize
from kvbench.workload import SyntheticSpec

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}

# Python's own allocations (tracemalloc: numpy's buffers and arrays included), not RSS,
# whose peak the imports already set higher than a streamed summary ever reaches
PEAK = """
import sys, tracemalloc
from kvbench.files import iter_jsonl, read_jsonl
from kvbench.replay import summarize
path, how = sys.argv[1], sys.argv[2]
tracemalloc.start()
summarize(iter_jsonl(path) if how == "stream" else read_jsonl(path))
print(tracemalloc.get_traced_memory()[1] // 1024)
"""


def _peak_kib(path: Path, how: str) -> int:
    out = subprocess.run([sys.executable, "-c", PEAK, str(path), how], capture_output=True,
                         text=True, env=ENV, check=True, timeout=300)
    return int(out.stdout.strip())


def _long_run(path: Path, n: int) -> None:
    """n records as a replay writes them: 32 chunks each, 5-25 ms apart (jittered)."""
    rng = random.Random(n)
    with JsonlWriter(path) as w:
        for i in range(n):
            t = i * 50_000_000
            chunks = [t + 80_000_000]
            for _ in range(31):
                chunks.append(chunks[-1] + rng.randint(5_000_000, 25_000_000))
            w.write({"request_id": f"r{i}", "session_id": f"s{i % 1024}-{i // 4096}",
                     "turn": i // 1024, "lane": i % 1024, "is_warmup": False,
                     "t_send_ns": t, "t_first_ns": chunks[0], "t_last_ns": chunks[-1],
                     "chunk_ns": chunks, "chunk_tokens": [1] * 32, "prompt_tokens": 20_000,
                     "completion_tokens": 32, "cached_tokens": 15_000,
                     "sent_prompt_tokens": 20_000, "ideal_cached_tokens": 16_000,
                     "max_tokens": 32, "status": "ok", "t_target_ns": None})


def test_the_summary_streams_its_records(tmp_path):
    """Peak memory of summarising N records, per request, streamed against read whole."""
    peak = {}
    for n in (1_000, 6_000):
        path = tmp_path / f"records-{n}.jsonl"
        _long_run(path, n)
        peak[n] = {how: _peak_kib(path, how) for how in ("stream", "whole")}
    per_request = {how: (peak[6_000][how] - peak[1_000][how]) * 1024 / 5_000
                   for how in ("stream", "whole")}
    # measured: 145 B per request streamed (seven packed numbers per request, the sessions'
    # first turns for the warm-cache guard; ITL as counts per 0.01 ms value, bounded by the
    # gaps' range) against 2.8 KB per request of these 32-chunk records held whole (the
    # issue: ~22 KB per request of real replies)
    assert per_request["stream"] < 400, per_request
    assert per_request["whole"] > 10 * per_request["stream"], per_request


def test_streamed_plain_and_gzip_summaries_are_the_same(tmp_path):
    plain = tmp_path / "records.jsonl"
    records = write_records(plain, n=300, conc=8, offload=False, seed=3, error_every=7)
    gz = tmp_path / "gz" / "records.jsonl.gz"
    with JsonlWriter(gz) as w:  # a .gz path is written compressed
        for r in records:
            w.write(r)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert gz.stat().st_size < plain.stat().st_size / 2
    expected = summarize(records)
    assert summarize(iter_jsonl(plain)) == expected
    assert summarize(iter_jsonl(gz)) == expected
    # records.jsonl finds records.jsonl.gz: one name for readers, whichever was written
    assert jsonl_path(gz.parent / "records.jsonl") == gz
    assert read_jsonl(gz.parent / "records.jsonl") == records


def test_a_killed_gzip_writer_leaves_every_completed_line(tmp_path):
    path = tmp_path / "scrape.jsonl.gz"
    w = JsonlWriter(path)
    for i in range(50):
        w.write({"i": i, "pad": "x" * 200})
    killed = tmp_path / "killed.jsonl.gz"
    shutil.copy(path, killed)  # as a SIGKILL leaves it: no gzip trailer
    w.close()
    assert [r["i"] for r in read_jsonl(killed)] == list(range(50))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # torn mid-block
    got = [r["i"] for r in read_jsonl(cut)]
    assert got == list(range(len(got))) and 10 < len(got) < 50


def test_replay_compress_writes_gzip_records(sse_server, tmp_path):
    cfg = ReplayConfig(url=sse_server, model="fake-model", concurrency=2, max_requests=8,
                       output_dir=tmp_path, synthetic=SyntheticSpec(num_sessions=3, scale=0.02),
                       think_time_scale=0, max_tokens_cap=4, compress_records=True)
    (tmp_path / "records.jsonl").write_text("stale\n")  # an earlier run's, removed
    summary = run_replay(cfg)
    assert not (tmp_path / "records.jsonl").exists()
    with gzip.open(tmp_path / "records.jsonl.gz", "rt") as f:
        recs = [json.loads(x) for x in f]
    assert len(recs) == summary["requests"]["total"] == 8
    assert summary["run"]["compressed"] is True
    assert summarize(iter_jsonl(tmp_path / "records.jsonl"))["requests"] == summary["requests"]


@pytest.mark.parametrize("compressed", [False, True])
def test_rescore_reads_a_compressed_scrape(tmp_path, compressed):
    """The committed H200 run, whose records and scrape are committed gzip-compressed (issue
    25): rescore derives the same server metrics from them and from their plain form."""
    run = (REPO / "benchmarks/results/h200/vllm/runs" / "qwen3-8b_tp1_conc12_kvdram-vllm-simple")
    job = tmp_path / run.name
    shutil.copytree(run, job)
    if (job / "result.orig.json").exists():
        (job / "result.orig.json").replace(job / "result.json")
    assert (job / "scrape.jsonl.gz").is_file() and (job / "records.jsonl.gz").is_file()
    if not compressed:
        for name in ("scrape.jsonl", "records.jsonl"):
            with gzip.open(job / f"{name}.gz", "rb") as g, (job / name).open("wb") as f:
                shutil.copyfileobj(g, f)
            (job / f"{name}.gz").unlink()
    out = subprocess.run([sys.executable, "-m", "kvbench", "rescore", str(job), "--format",
                          "json"], capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    new = json.loads((job / "result.json").read_text())
    assert new["server_metrics"]["present"] is True
    assert new["server_metrics"]["counters"]["connector_lookups"] > 0
    assert new["validity"]["checks"]["label"]["passed"] is True
