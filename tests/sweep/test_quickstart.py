"""`kvbench quickstart`, as the README's first command runs it (source checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import REPO

from kvbench.files import read_json

pytestmark = pytest.mark.slow


def test_quickstart_runs_and_ends_with_table_and_dashboard(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "120"}
    t0 = time.monotonic()
    # A faster clock than the default keeps CI short; the pipeline is the same.
    out = subprocess.run([sys.executable, "-m", "kvbench", "quickstart", "--results",
                          str(tmp_path / "qs"), "--time-scale", "200"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=170)
    elapsed = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    assert "6 jobs: 6 ran" in out.stdout
    assert "none (n=1)" in out.stdout and "dram (n=1)" in out.stdout
    assert "cache hit rate (host)" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last == f"dashboard: {(tmp_path / 'qs' / 'dashboard.html').resolve()}"
    assert (tmp_path / "qs" / "dashboard.html").stat().st_size > 10_000
    results = sorted((tmp_path / "qs").glob("*/result.json"))
    assert len(results) == 6
    by_name = {p.parent.name: read_json(p) for p in results}
    assert all(r["status"] == "ok" for r in by_name.values())
    assert elapsed < 120, f"quickstart took {elapsed:.0f} s"
    # Timings are in the embedded engine's clock, not the 200x compressed wall clock: an 8B
    # bf16 model on one H100 cannot decode faster than weights / HBM bandwidth
    # (16 GB / 3.35 TB/s = 4.8 ms per token), so interactivity stays under ~210 tok/s.
    for r in by_name.values():
        inter = r["request_metrics"]["latency"]["interactivity_tok_s"]["p50"]
        assert 20 < inter < 210, (r["exp_name"], inter)
