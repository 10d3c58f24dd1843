"""Golden `kvbench plan --format json` output for real rows of the InferenceX configs.

Regenerate after an intended change with KVBENCH_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvbench.cli import main

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "qwen3.5-fp8-b300-hicache": ("qwen3.5-fp8-b300-sglang-agentic-mtp", 32, 32),
    "glm5.2-fp4-b300-hicache": ("glm5.2-fp4-b300-sglang-agentic-mtp", 12, 12),
    "dsv4-fp4-b300-hicache-ratio": ("dsv4-fp4-b300-sglang-agentic-hicache-mtp", 96, 96),
    "dsv4-fp4-b300-vllm-simple": ("dsv4-fp4-b300-vllm-agentic-mtp", 16, 48),
    "kimik3-fp4-b300-mooncake": ("kimik3-fp4-b300-vllm-agentic-dspark", 8, 8),
    "minimaxm3-fp4-b300-trtllm": ("minimaxm3-fp4-b300-trtllm-agentic-mtp", 20, 20),
    "minimaxm3-fp8-mi300x-lmcache": ("minimaxm3-fp8-mi300x-vllm-agentic-mtp", 16, 16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_json_matches_golden(name, shared_data, capsys):
    key, lo, hi = CASES[name]
    inferencex = shared_data / "inferencex"
    main(["plan", "--sizing", "budget", "--config-files", str(inferencex / "amd-master.yaml"),
          "--config-files", str(inferencex / "nvidia-master.yaml"),
          "--config-keys", key, "--min-conc", str(lo), "--max-conc", str(hi), "--format", "json"])
    got = json.loads(capsys.readouterr().out)
    path = GOLDEN / f"{name}.json"
    if os.environ.get("KVBENCH_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert got, "the selection matched no rows"
    for plan in got:  # the contract keys, whatever else changes
        assert {"exp-name", "config-key", "total-cpu-dram-gb", "host-pools", "projected-host-gb",
                "within-budget", "engine-args", "warnings", "errors"} <= set(plan)
    assert got == json.loads(path.read_text())
