"""`kvbench simulate-jobs` tables, piped as a user's `| less` or CI log gets them: every
selected job (no silent cap), one short id per job, full names (no 80-column cut)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_piped_table_lists_every_selected_job_in_full():
    res = subprocess.run(
        [sys.executable, "-m", "kvbench", "simulate-jobs", "--config-files",
         str(REPO / "examples" / "quickstart.yaml"), "--runner-config",
         str(REPO / "examples" / "runners.yaml"), "--trace",
         str(REPO / "src" / "kvbench" / "workload" / "data" / "claude-code"), "--bounds", "once"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines()
            if line.startswith("│")]
    jobs = [r for r in rows if r[0]]
    assert len(jobs) == 6  # 2 arms x 3 concurrencies: all of them
    assert len({r[0] for r in jobs}) == 6 and all(len(r[0]) == 8 for r in jobs)
    assert {r[2] for r in jobs} == {f"qwen3-32b_tp1_conc{c}_kv{m}" for c in (3, 6, 12)
                                    for m in ("none", "dram-hicache")}
    assert {r[1] for r in jobs} == {"qwen3-32b-fp8-h100-sim-agentic"}
    # each offload job shows both arms; each arm has TTFT, ITL and throughput
    arms = [r[6] for r in rows]
    assert arms.count("offload") == 3 and arms.count("resident") == 6
    assert all(r[9] != "-" and r[10] != "-" and r[11] != "-" for r in rows)
