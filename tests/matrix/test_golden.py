"""On the real InferenceX files, `kvbench matrix` prints exactly the reference rows."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS, golden_args, golden_cases, golden_text

from kvbench.cli import main
from kvbench.matrix import Selection, generate_rows

BASE = ["matrix", "--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS),
        "--format", "json"]


@pytest.mark.parametrize("case", sorted(golden_cases()))
def test_cli_json_is_byte_identical_to_reference(case, real_files, capsys):
    """full-sweep cases, and test-config ones (`--config-keys`: the label containing the
    --runner-node-filter string kept, `--conc`)."""
    main([*BASE, *golden_args(golden_cases()[case])])
    out = capsys.readouterr().out.strip()
    assert out == golden_text(case)
    assert len(json.loads(out)) == golden_cases()[case]["rows"]


@pytest.fixture(scope="module")
def agentic_rows(real_files):
    return generate_rows(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                   scenario_types=("agentic-coding",), no_evals=True))


def test_agentic_catalog_facts(agentic_rows):
    assert len(agentic_rows) == 746
    assert sum("prefill" not in r for r in agentic_rows) == 482
    assert sum("prefill" in r for r in agentic_rows) == 264
    mix = Counter(r.get("kv-offload-backend", {}).get("name", "none") for r in agentic_rows)
    assert mix == {"none": 433, "hicache": 168, "vllm-simple": 52, "mooncake": 50,
                   "native": 34, "lmcache": 9}


def test_documented_single_node_row_verbatim(agentic_rows):
    expected = {
        "image": "lmsysorg/sglang:v0.5.16-cu130", "model": "Qwen/Qwen3.5-397B-A17B-FP8",
        "model-prefix": "qwen3.5", "precision": "fp8", "framework": "sglang",
        "runner": "cluster:b300-nv", "tp": 2, "pp": 1, "dcp-size": 1, "pcp-size": 1, "ep": 2,
        "dp-attn": False, "spec-decoding": "mtp", "conc": 56, "kv-offloading": "dram",
        "total-cpu-dram-gb": 599, "duration": 3600,
        "exp-name": "qwen3.5_tp2_conc56_kvdram-hicache_spec-mtp",
        "scenario-type": "agentic-coding", "kv-offload-backend": {"name": "hicache"},
    }
    matches = [r for r in agentic_rows if r["exp-name"] == expected["exp-name"]
               and r["runner"] == "cluster:b300-nv" and r["precision"] == "fp8"]
    assert matches and json.dumps(matches[0]) == json.dumps(expected)


@pytest.mark.parametrize("key,count", [
    ("qwen3.5-fp8-b300-sglang-agentic-mtp", 34),
    ("dsv4-fp4-b200-sglang-agentic-hicache-mtp", 12),
    ("minimaxm3-fp4-b300-trtllm-agentic-mtp", 11),
])
def test_documented_per_key_counts(real_files, key, count):
    rows = generate_rows(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                   config_keys=(key,), no_evals=True))
    assert len(rows) == count


def test_concurrency_order_is_the_written_order(agentic_rows):
    qwen = [r["conc"] for r in agentic_rows if r["model"] == "Qwen/Qwen3.5-397B-A17B-FP8"
            and r["runner"] == "cluster:b300-nv" and r["tp"] == 4 and r["precision"] == "fp8"
            and r["image"] == "lmsysorg/sglang:v0.5.16-cu130"]
    assert qwen[:16] == [1, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 60, 64, 68, 72]
