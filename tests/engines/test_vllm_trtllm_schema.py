"""vLLM and TRT-LLM command lines for the real rows, checked against a schema.

vLLM's own parser also checks them (test_vllm_parser.py), but it does not restrict values
such as --block-size; this schema adds the value sets from vLLM's docs and the InferenceX
launchers (the project's reference notes kvoffload.md section 4, inferencex.md section 5) and the
sizing invariants. TRT-LLM is not installable on a CPU machine: its flags and YAML config are
checked against this schema only."""

from __future__ import annotations

import json

import pytest
import yaml

from kvbench.engines import get_adapter
from kvbench.plan import plan_job

BOOL = None
# flag -> allowed values (a set), a checker, or BOOL for a bare flag
VLLM_FLAGS: dict[str, object] = {
    "--served-model-name": str, "--host": {"127.0.0.1"}, "--port": int,
    "--tensor-parallel-size": int, "--pipeline-parallel-size": int,
    "--data-parallel-size": int, "--enable-expert-parallel": BOOL,
    "--block-size": {"1", "8", "16", "32", "64", "128", "256"},
    "--kv-cache-dtype": {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                         "fp8_ds_mla"},
    "--gpu-memory-utilization": float, "--max-num-seqs": int,
    "--max-num-batched-tokens": int, "--max-model-len": int,
    "--enable-prefix-caching": BOOL, "--enable-prompt-tokens-details": BOOL,
    "--trust-remote-code": BOOL, "--language-model-only": BOOL, "--stream-interval": int,
    "--prefill-schedule-interval": int, "--long-prefill-token-threshold": int,
    "--speculative-config": "json", "--kv-transfer-config": "json",
    "--kv-offloading-backend": {"native", "lmcache"}, "--kv-offloading-size": float,
    # parsers and attention settings of the InferenceX launchers (launcher_oracle/)
    "--reasoning-parser": {"deepseek_v4", "minimax_m3", "kimi_k3"},
    "--tool-call-parser": {"deepseek_v4", "minimax_m3", "kimi_k3"},
    "--enable-auto-tool-choice": BOOL, "--tokenizer-mode": {"deepseek_v4"},
    "--attention-backend": {"TRITON_ATTN", "TOKENSPEED_MLA"}, "--attention-config": "json",
    "--no-enable-flashinfer-autotune": BOOL, "--no-disable-hybrid-kv-cache-manager": BOOL,
    "--default-chat-template-kwargs": "json", "--disable-uvicorn-access-log": BOOL,
    "--compilation-config": "json", "--enable-cumem-allocator": BOOL,
    "--enable-chunked-prefill": BOOL, "--cpu-offload-gb": int,
    "--max-cudagraph-capture-size": int, "--safetensors-load-strategy": {"lazy"},
    "--moe-backend": {"aiter", "deep_gemm_amxf4_mega_moe"}, "--hf-overrides": "json",
    "--enable-ep-weight-filter": BOOL, "--numa-bind": BOOL, "--disable-custom-all-reduce": BOOL,
    "--async-scheduling": BOOL, "--distributed-executor-backend": {"mp"},
    "--decode-context-parallel-size": int, "--dcp-comm-backend": {"a2a"},
    "--load-format": {"fastsafetensors"}, "--prefix-match-unit": int,
}
TRTLLM_FLAGS: dict[str, object] = {
    "--host": {"127.0.0.1"}, "--port": int, "--tp_size": int, "--ep_size": int,
    "--pp_size": int, "--backend": {"pytorch"}, "--config": str, "--chat_template": str,
}


def _check(argv: list[str], schema: dict[str, object], where: str) -> list[str]:
    problems, i = [], 0
    while i < len(argv):
        flag = argv[i]
        if flag not in schema:
            problems.append(f"{where}: unknown flag {flag}")
            i += 1
            continue
        rule = schema[flag]
        if rule is BOOL:
            i += 1
            continue
        value = argv[i + 1]
        i += 2
        if isinstance(rule, set) and value not in rule:
            problems.append(f"{where}: {flag} {value} not in {sorted(rule)}")
        elif rule in (int, float):
            try:
                number = rule(value)
            except ValueError:
                problems.append(f"{where}: {flag} {value} is not {rule.__name__}")
                continue
            if number <= 0 or (flag == "--gpu-memory-utilization" and number > 1):
                problems.append(f"{where}: {flag} {value} out of range")
        elif rule == "json":
            obj = json.loads(value)
            methods = ("mtp", "eagle3", "dspark")
            if flag == "--speculative-config" and obj.get("method") not in methods:
                problems.append(f"{where}: speculative method {obj.get('method')}")
            if flag == "--kv-transfer-config" and {"kv_connector", "kv_role"} - set(obj):
                problems.append(f"{where}: kv-transfer-config lacks kv_connector/kv_role")
    return problems


@pytest.mark.slow
def test_vllm_rows_match_the_schema(real_single_node_jobs):
    jobs = [j for j in real_single_node_jobs if j.framework == "vllm"]
    assert len(jobs) >= 100
    problems = []
    for job in jobs:
        plan = plan_job(job)
        spec = get_adapter("vllm").build(job, plan, port=8000)
        assert spec.argv[:3] == ["vllm", "serve", job.model]
        problems += _check(spec.argv[3:], VLLM_FLAGS, job.exp_name)
        dp = job.row.get("dp-attn")
        # absent: vLLM's default, 1,024 sequences on a GPU of >= 70 GiB (vllm 0.33
        # engine/arg_utils.py get_batch_defaults), as the MiniMax-M3 Blackwell launchers run
        seqs = (int(spec.argv[spec.argv.index("--max-num-seqs") + 1])
                if "--max-num-seqs" in spec.argv else 1024)
        ranks = job.row["tp"] if dp else 1
        assert seqs * ranks >= 2 * job.conc, job.exp_name  # room for subagent fan-out
        if dp:
            assert spec.router_argv and spec.correlation_header == "x-session-id"
        if plan.backend == "vllm-simple":
            connector = json.loads(spec.argv[spec.argv.index("--kv-transfer-config") + 1])
            assert connector["kv_connector"] == "SimpleCPUOffloadConnector", job.exp_name
            # the launcher's spelling (launcher sizing): an engine total or bytes per rank
            # (vllm 0.33 simple_cpu_offload_connector.py:100-115)
            extra = connector["kv_connector_extra_config"]
            assert (extra.get("cpu_bytes_to_use") or extra["cpu_bytes_to_use_per_rank"]) > 0
    assert problems == []


def test_trtllm_rows_match_the_schema(real_single_node_jobs, tmp_path):
    jobs = [j for j in real_single_node_jobs if j.framework == "trt"]
    assert len(jobs) >= 20
    for job in jobs:
        plan = plan_job(job)
        spec = get_adapter(job.framework).build(job, plan, port=8000, work_dir=tmp_path)
        assert spec.argv[5:7] == ["trtllm-serve", job.model]  # under mpirun -n 1
        assert _check(spec.argv[7:], TRTLLM_FLAGS, job.exp_name) == []
        config = yaml.safe_load(spec.files["trtllm-config.yaml"])
        kv = config["kv_cache_config"]
        assert kv["host_cache_size"] == plan.engine_config["kv_cache_config"]["host_cache_size"]
        assert kv["enable_block_reuse"] is True and 0 < kv["free_gpu_memory_fraction"] <= 1
        assert config["max_batch_size"] == job.conc and config["return_perf_metrics"] is True
