"""`kvbench run --profile agentx` on the embedded engine: each result carries the AgentX
verdict beside kvbench's own validity, and compare and the dashboard show it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO


def test_run_profile_agentx_verdict_in_result_compare_and_dashboard(tmp_path):
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200",
           "KVBENCH_NO_CACHE": "1"}
    # the quickstart's row as Qwen3-8B on a 1 TiB node; the engine's counters count the
    # profiling phase (metrics/window.py: the warm-up left out, as AIPerf), so they and the
    # profiled requests' usage agree, which the cache-reuse check below asserts
    examples = REPO / "examples"
    recipe = tmp_path / "recipe" / "quickstart.yaml"
    recipe.parent.mkdir()
    recipe.write_text((examples / "quickstart.yaml").read_text()
                      .replace("Qwen/Qwen3-32B", "Qwen/Qwen3-8B")
                      .replace("model-prefix: qwen3-32b", "model-prefix: qwen3-8b")
                      .replace("precision: fp8", "precision: bf16")
                      .replace("conc-list: [3, 6, 12]", "conc-list: [2]"))
    (recipe.parent / "runners.yaml").write_text((examples / "runners.yaml").read_text()
                                                .replace("2_063_837", "1_048_576"))
    run = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(recipe),
         "--max-requests", "6", "--time-scale", "50",
         "--results", str(tmp_path / "r"), "--profile", "agentx", "--format", "json"],
        capture_output=True, text=True, env=env, cwd=REPO)
    assert run.returncode == 0, run.stderr
    results = sorted((tmp_path / "r").glob("*/result.json"))
    assert len(results) == 2
    for path in results:
        result = json.loads(path.read_text())
        sub = result["validity"]["submission"]
        assert sub["profile"] == "agentx-v1" and sub["submission_valid"] is False
        # a short smoke run: a request bound, not AgentX's profiling duration; the bundled
        # traces are no AgentX corpus; the embedded engine is a simulation
        assert sub["reasons"][0] == ("duration: a request-count bound, not a profiling "
                                     "duration; AgentX profiles for a duration >= 900 s")
        assert [r.split(":")[0] for r in sub["reasons"]] == ["duration", "corpus", "engine"]
        assert result["workload"]["profile"] == "agentx-v1"
        # counted from the snapshot the replay took as its warm-up ended
        assert result["server_metrics"]["counted_from"] == "profiling start"
        phases = [json.loads(line)["phase"] for line in
                  (path.parent / "scrape.jsonl").read_text().splitlines()]
        assert phases.count("profiling_start") == 1 and phases[0] == "pre"
        reuse = result["cache_reuse"]  # InferenceX's cache-reuse view, per concurrency
        assert reuse["source"] == "engine tier counters" and reuse["agrees"] is True
        assert reuse["gpu"] + reuse["host"] + reuse["external"] + reuse["recomputed"] == \
            pytest.approx(1.0)
        summary = json.loads((path.parent / "summary.json").read_text())
        # the harness's warm-up: a t* request per lane, then 10 one-token requests per lane
        assert summary["run"]["warmup_per_lane"] == 10 and summary["run"]["seed"] == 42
        assert summary["requests"]["warmup"] >= 10 * result["conc"]
        assert result["workload"]["corpus"]["agentx"] is False
        assert result["workload"]["inflight"]["lanes"] == result["conc"]
        assert summary["profile"]["checks"]["fresh_server"]["passed"] is True
    compare = subprocess.run([sys.executable, "-m", "kvbench", "compare", str(tmp_path / "r")],
                             capture_output=True, text=True, env=env, cwd=REPO)
    assert compare.returncode == 0, compare.stderr
    assert "submission" in compare.stdout and "0/1 agentx-v1" in compare.stdout
    assert "prompt tokens from" in compare.stdout and "recomputed" in compare.stdout
    html = (tmp_path / "r" / "dashboard.html").read_text()
    assert "not a submission (agentx-v1)" in html
    assert "Cache reuse per concurrency" in html and '"name":"recomputed"' in html
