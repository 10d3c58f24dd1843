"""`kvbench simulate` and `kvbench serve-sim` through the real command line."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.servers import free_port as _free_port
from fixtures.servers import stop
from sim.conftest import MOONCAKE

from kvbench.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def small_trace(tmp_path: Path) -> Path:
    """The first 1,000 requests (about 5 minutes) of the Mooncake conversation trace."""
    with gzip.open(MOONCAKE, "rt") as f:
        lines = [next(f) for _ in range(1000)]
    path = tmp_path / "mooncake-1000.jsonl"
    path.write_text("".join(lines))
    return path


def simulate_json(capsys, *args: str) -> dict:
    main(["simulate", *args, "--format", "json"])
    return json.loads(capsys.readouterr().out)


def test_simulate_json_has_the_contract_keys(small_trace, capsys, tmp_path):
    out = tmp_path / "sim.json"
    doc = simulate_json(capsys, "--trace", str(small_trace), "--gpu-tokens", "inf",
                        "--output", str(out))
    assert doc["requests"] == 1000 and doc["errors"] == 0
    assert doc["prompt_tokens"] > 0
    assert set(doc["hit_rate"]) == {"device", "host", "total"}
    assert doc["hit_rate"]["total"] == doc["hit_rate"]["device"] > 0
    for key in ("ttft_ms", "e2e_ms"):
        assert doc[key]["p50"] <= doc[key]["p99"]
    assert doc["throughput"]["input_tok_s"] > 0
    assert json.loads(out.read_text()) == doc


def test_simulate_compare_runs_both_arms(small_trace, capsys):
    doc = simulate_json(capsys, "--trace", str(small_trace), "--gpu-tokens", "150000",
                        "--host-tokens", "2000000", "--compare")
    resident, offload = doc["arms"]["resident"], doc["arms"]["offload"]
    assert resident["hit_rate"]["host"] == 0 < offload["hit_rate"]["host"]
    assert offload["hit_rate"]["total"] >= resident["hit_rate"]["total"]
    assert offload["setup"]["host_tokens"] == 2000000
    # closed loop: eight session lanes
    lanes = simulate_json(capsys, "--trace", str(small_trace), "--gpu-tokens", "150000",
                          "--host-tokens", "2000000", "--compare", "--concurrency", "8")
    assert lanes["arms"]["offload"]["requests"] == 1000


def test_simulate_bad_policy_names_the_allowed_values(small_trace, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(small_trace), "--write-policy", "write_around"])
    assert exc.value.code == 2
    assert "write_through_selective" in capsys.readouterr().err


def test_simulate_table_output(small_trace, capsys):
    main(["simulate", "--trace", str(small_trace), "--host-cache-gb", "10", "--compare"])
    out = capsys.readouterr().out
    assert "hit rate host" in out and "resident" in out and "offload" in out


def test_serve_sim_command_serves_and_exposes_metrics(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "serve-sim", "--model", "llama-3.1-8b",
         "--hardware", "h200", "--tp", "1", "--host-cache-gb", "2", "--port", str(port),
         "--time-scale", "50", "--served-model-name", "sim-8b", "--engine-profile", "vllm"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / "server.log").read_text()) from None
                time.sleep(0.2)
        body = json.dumps({"model": "sim-8b", "prompt": "hello " * 2000, "max_tokens": 4})
        usage = []
        for _ in range(2):
            req = urllib.request.Request(f"{base}/v1/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                usage.append(json.loads(r.read())["usage"])
        assert usage[0]["prompt_tokens"] == 2001  # 2,000 words and the trailing space
        assert usage[1]["prompt_tokens_details"]["cached_tokens"] == 31 * 64  # full pages
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            text = r.read().decode()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"sglang:prompt_tokens", "sglang:hicache_host_total_tokens",
                "sglang:max_total_num_tokens"} <= names
    finally:
        stop(proc)
        log.close()
    assert "(vllm engine)" in (tmp_path / "server.log").read_text()


def test_simulate_jobs_runs_resident_and_offload_arms_of_a_recipe_row(capsys, claude_code_paths):
    from conftest import INFERENCEX

    traces = [a for p in claude_code_paths[:4] for a in ("--trace", str(p))]
    main(["simulate-jobs", "--config-files", str(INFERENCEX / "nvidia-master.yaml"),
          "--runner-config", str(INFERENCEX / "runners.yaml"),
          "--config-keys", "qwen3.5-fp8-b200-sglang-agentic-mtp", "--min-conc", "64",
          "--max-conc", "64", *traces, "--bounds", "once", "--format", "json"])
    entries = json.loads(capsys.readouterr().out)
    offload = [e for e in entries if e["backend"] == "hicache"]
    assert offload, [e["exp-name"] for e in entries]
    for e in offload:
        arms = e["arms"]
        assert arms["offload"]["setup"]["host_tokens"] == e["host-kv-tokens"] > 0
        assert arms["resident"]["setup"]["gpu_tokens"] == e["gpu-kv-tokens"]
        assert arms["offload"]["setup"]["concurrency"] == e["conc"] == 64
        assert e["engine-profile"] == arms["offload"]["setup"]["engine_profile"] == "sglang"
        assert arms["offload"]["hit_rate"]["total"] >= arms["resident"]["hit_rate"]["total"]


def test_simulate_speculative_decoding_shortens_inter_token_latency(small_trace, capsys):
    args = ["--trace", str(small_trace), "--gpu-tokens", "inf", "--open-loop",
            "--arrival-scale", "20"]
    plain = simulate_json(capsys, *args)
    spec = simulate_json(capsys, *args, "--spec-accept-length", "2.5",
                         "--spec-verify-tokens", "4")
    # 2.5 tokens per step at 1.1x the step cost; prefill steps of other requests dilute it
    assert spec["itl_ms"]["p50"] < 0.75 * plain["itl_ms"]["p50"]
    assert spec["cached_tokens"] == plain["cached_tokens"]


def test_simulate_engine_profile_changes_the_costing(small_trace, capsys):
    args = ("--trace", str(small_trace), "--gpu-tokens", "inf", "--concurrency", "4",
            "--hardware", "h200-measured")
    sglang = simulate_json(capsys, *args)
    tf = simulate_json(capsys, *args, "--engine-profile", "transformers")
    assert sglang["setup"]["engine_profile"] == "sglang"
    assert tf["setup"]["engine_profile"] == "transformers"
    # transformers' host work per step (~49 ms + 23 ms per sequence) dominates decode
    assert tf["itl_ms"]["p50"] > 10 * sglang["itl_ms"]["p50"]
    assert tf["requests"] == sglang["requests"]


def test_simulate_unknown_engine_profile_names_the_known_ones(small_trace, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(small_trace), "--engine-profile", "tgi"])
    assert exc.value.code != 0
    assert "sglang, transformers, vllm" in capsys.readouterr().err


def _jobs(capsys, trace, key: str, *filters: str) -> list[dict]:
    from conftest import INFERENCEX

    main(["simulate-jobs", "--config-files", str(INFERENCEX / "nvidia-master.yaml"),
          "--runner-config", str(INFERENCEX / "runners.yaml"), "--workers", "1",
          "--config-keys", key, *filters, "--max-jobs", "1000", "--trace", str(trace),
          "--bounds", "once", "--format", "json"])
    entries = json.loads(capsys.readouterr().out)
    assert entries and {e["config-key"] for e in entries} == {key}
    return entries


def test_simulate_jobs_models_every_row_kind_or_says_why(capsys, claude_code_paths):
    """A disaggregated multi-node row (prefill and decode workers), a DP-attention row (one
    rank per GPU behind its router) and a row whose plan leaves no GPU KV: each gets an
    entry, the last with its reason."""
    trace = claude_code_paths[0]
    disagg = _jobs(capsys, trace, "minimaxm3-fp4-gb300-dynamo-vllm-agentic-mtp-disagg",
                   "--max-conc", "24")
    for e in disagg:
        s = e["arms"]["resident"]
        assert e["multinode"] and s["setup"]["disagg"]["decode_ranks"] == e["decode-ranks"]
        assert s["kv_transfer_tokens"] > 0 and s["requests"] > 0
        assert s["setup"]["kv_manager"] == "vllm_blocks"  # dynamo-vllm runs vLLM's manager
    # the launcher's --hicache-ratio 8 oversubscribes these rows' budget on kvbench's estimate
    # (tests/plan/test_launcher_sizing.py): the planner's budget sizing models them
    dp = _jobs(capsys, trace, "dsv4-fp4-b200-sglang-agentic-hicache-mtp", "--max-conc", "32",
               "--sizing", "budget")
    dpa = [e for e in dp if "dpa" in e["exp-name"] or e["ranks"] > 1]
    assert dpa
    for e in dpa:
        s = e["arms"]["resident"]
        assert e["ranks"] == 8 and s["setup"]["dp"] == 8 and len(s["ranks"]) == 8
        assert s["setup"]["router"] == e["router"]
        assert sum(r["requests"] for r in s["ranks"]) == s["requests"]
    refused = _jobs(capsys, trace, "kimik3-fp4-gb200-dynamo-vllm-agentic", "--min-conc", "384",
                    "--max-conc", "384")
    assert any("0 GPU KV tokens per rank" in e.get("skipped", "") for e in refused)
