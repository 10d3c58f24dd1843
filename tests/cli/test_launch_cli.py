"""`kvbench launch`: dry runs over the real recipes, and one real launch of the embedded
engine's stand-in through the same code path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

SRC = Path(__file__).resolve().parents[2] / "src"


def kvbench(*args: str, env: dict | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kvbench", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


SEL = ["--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS)]


def test_dry_run_json_has_contract_keys_and_redacts_secrets():
    res = kvbench("launch", "--dry-run", "--format", "json", *SEL,
                  "--config-keys", "dsv4-fp4-b300-sglang-agentic-hicache-mtp",
                  "--min-conc", "64", "--max-conc", "64", "--engine-env", "HF_TOKEN=hf_secret",
                  "--explain")
    assert res.returncode == 0, res.stderr
    jobs = json.loads(res.stdout)
    assert len(jobs) == 3
    for job in jobs:
        assert {"exp-name", "config-key", "argv", "env", "files", "router-argv"} <= set(job)
        assert job["env"]["HF_TOKEN"] == "<redacted>"
        assert "hf_secret" not in json.dumps(job)
        assert {s["source"] for s in job["sources"]} <= {"job", "plan", "override", "default"}
    with_router = [j for j in jobs if j["router-argv"]]
    assert with_router and all("--dp-aware" in j["router-argv"] for j in with_router)
    assert all(j["correlation-header"] == "x-smg-routing-key" for j in with_router)


def test_dry_run_text_shows_argv_env_files_and_sources():
    res = kvbench("launch", "--dry-run", *SEL, "--config-keys",
                  "minimaxm3-fp4-b300-trtllm-agentic-mtp", "--max-conc", "1", "--explain")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "trtllm-serve nvidia/MiniMax-M3-NVFP4" in out
    assert "trtllm-config.yaml" in out and "host_cache_size" in out
    assert "where each value comes from" in out and "plan.engine_config" in out


def test_unsupported_rows_are_skipped_with_the_reason():
    res = kvbench("launch", "--dry-run", "--format", "json", *SEL, "--config-keys",
                  "kimik3-fp4-gb200-dynamo-vllm-agentic", "qwen3.5-fp8-b300-sglang-agentic-mtp",
                  "--max-conc", "1")
    assert res.returncode == 0, res.stderr
    names = {j["config-key"] for j in json.loads(res.stdout)}
    assert names == {"qwen3.5-fp8-b300-sglang-agentic-mtp"}
    # the Dynamo adapter renders the row's srt-slurm recipe, a field of which srtctl's schema
    # rejects: refused, with that reason
    assert "skipped kimik3_p1x16_d0x16_conc1 (kimik3-fp4-gb200-dynamo-vllm-agentic): " \
        in res.stderr
    assert "srtctl rejects benchmark.aiperf_server_metrics" in " ".join(res.stderr.split())


def test_a_row_behind_vllms_own_server_has_no_front_and_says_what_verifies_it():
    """A Kimi-K3 row whose recipe sets frontend.type vllm: the leader `vllm serve` binds the
    public port, the other node rank runs headless, no front process and no etcd/NATS; its
    runner's srtctl is a fork no recording read, and the launch says so."""
    res = kvbench("launch", "--dry-run", "--format", "json", *SEL, "--config-keys",
                  "kimik3-fp4-b200-dynamo-vllm-agentic", "--max-conc", "1", "--port", "8000")
    assert res.returncode == 0, res.stderr
    (spec,) = json.loads(res.stdout)
    assert spec["argv"] == [] and spec["services"] == [] and spec["nodes"] == 2
    leader, follower = spec["workers"]
    assert leader["argv"][:7] == ["vllm", "serve", "/model", "--host", "0.0.0.0", "--port",
                                  "8000"]
    assert "--headless" in follower["argv"] and "--port" not in follower["argv"]
    assert spec["base-url"].endswith(":8000") and leader["url"] == "http://{node0}:8000"
    assert any("no recording verifies this row" in w and "srt-slurm-nv@df5baa93" in w
               for w in spec["warnings"]), spec["warnings"]


def test_real_launch_refuses_more_than_one_job():
    res = kvbench("launch", *SEL, "--config-keys", "qwen3.5-fp8-b300-sglang-agentic-mtp")
    assert res.returncode == 2
    assert "starts one server" in res.stderr and "--exp-name" in res.stderr


def test_bad_format_names_allowed_values():
    res = kvbench("launch", "--dry-run", "--format", "yaml", *SEL)
    assert res.returncode == 2 and "allowed: text, json" in res.stderr


@pytest.mark.slow
def test_real_launch_of_a_missing_engine_fails_fast_with_its_reason(tmp_path):
    # The row's real engine (sglang) is not installed as a server here; the launch must fail
    # with the log tail rather than wait for the deadline, and leave its records behind.
    res = kvbench("launch", *SEL, "--config-keys", "qwen3.5-fp8-b300-sglang-agentic-mtp",
                  "--exp-name", "qwen3.5_tp2_conc1_kvnone_spec-mtp", "--work-dir",
                  str(tmp_path), "--ready-timeout", "300", "--grace", "2",
                  "--port", "39517", timeout=120)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "exited with code" in res.stderr
    command = json.loads((tmp_path / "command.json").read_text())
    assert command["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert (tmp_path / "plan.json").exists() and (tmp_path / "server.log").exists()


DISAGG = ["--config-keys", "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp"]


def test_disaggregated_dry_run_shows_every_worker_and_redacts_their_secrets():
    res = kvbench("launch", "--dry-run", *SEL, *DISAGG, "--max-conc", "1",
                  "--engine-env", "HF_TOKEN=hf_secret")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "prefill 0 (node 0, http://{node0}:30001)" in out
    assert "decode 0 (node 1, http://{node1}:30001)" in out
    assert "--disaggregation-mode prefill" in out and "--disaggregation-mode decode" in out
    assert "router argv" in out and "--pd-disaggregation" in out
    assert "hf_secret" not in out and "HF_TOKEN='<redacted>'" in out
    res = kvbench("launch", "--dry-run", "--format", "json", "--explain", *SEL, *DISAGG,
                  "--max-conc", "1", "--engine-env", "HF_TOKEN=hf_secret")
    job, = json.loads(res.stdout)
    assert job["nodes"] == 2 and [w["role"] for w in job["workers"]] == ["prefill", "decode"]
    assert "hf_secret" not in json.dumps(job)
    assert all(w["plan"]["within-budget"] and w["sources"] for w in job["workers"])


def test_a_real_launch_of_a_disaggregated_row_is_refused_in_one_line():
    res = kvbench("launch", *SEL, *DISAGG, "--exp-name", "dsv4_p1x8_d1x8_conc1_kvdram-hicache")
    assert res.returncode == 2, res.stderr
    assert "a disaggregated row runs 2 servers on 2 nodes" in res.stderr
    assert "Traceback" not in res.stderr
