"""The TRT-LLM YAML config of the real MiniMax-M3 rows, checked against TensorRT-LLM's own
schema as its source defines it. TensorRT-LLM does not install on a CPU machine, so the field
names and constraints below are transcribed from NVIDIA/TensorRT-LLM
`tensorrt_llm/llmapi/llm_args.py` (KvCacheConfig, DecodingBaseConfig / EagleDecodingConfig,
MiniMaxM3SparseAttentionConfig, all StrictBaseModel: unknown keys are rejected) and its
MiniMax-M3 sparse-attention tests (`implementation`, `indexer_kv_dtype`,
`fuse_qkv_index_projection`; msa needs `sparse_disable_index_value`, the fused projection an
fp8 main KV cache), and compared with the seed launcher's ser.yaml
(minimaxm3_fp4_b300_trt_mtp.sh at InferenceX 843c6254f)."""

from __future__ import annotations

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.engines import get_adapter
from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job

TOP_LEVEL = {"max_seq_len", "max_num_tokens", "max_batch_size", "stream_interval",
             "return_perf_metrics", "enable_iter_perf_stats", "cuda_graph_config",
             "kv_cache_config", "speculative_config", "sparse_attention_config", "moe_config",
             "reasoning_parser", "trust_remote_code", "enable_chunked_prefill",
             # TorchLlmArgs fields the launchers' ser.yaml sets (launcher oracle recordings)
             "torch_compile_config", "scheduler_config", "num_postprocess_workers",
             "print_iter_log", "enable_autotuner", "enable_attention_dp"}
KV_CACHE = {"free_gpu_memory_fraction", "enable_block_reuse", "enable_partial_reuse",
            "block_reuse_policy", "tokens_per_block", "use_kv_cache_manager_v2", "dtype",
            "host_cache_size", "event_buffer_max_size"}
SPECULATIVE = {"decoding_type", "max_draft_len", "speculative_model"}
SPARSE_M3 = {"algorithm", "implementation", "indexer_kv_dtype", "sparse_disable_index_value",
             "fuse_qkv_index_projection", "sparse_num_index_heads", "sparse_index_dim",
             "sparse_block_size", "sparse_topk_blocks"}
CUDA_GRAPH = {"enable_padding", "max_batch_size", "batch_sizes"}
MOE = {"backend", "use_low_precision_moe_combine"}


def _configs(tmp_path):
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                 frameworks=("trt",), single_node=True))
    for job in jobs:
        spec = get_adapter("trt").build(job, plan_job(job), port=8000, work_dir=tmp_path)
        yield job, yaml.safe_load(spec.files["trtllm-config.yaml"])


def test_minimax_trt_configs_use_only_known_fields(tmp_path):
    seen = 0
    for job, config in _configs(tmp_path):
        seen += 1
        assert set(config) <= TOP_LEVEL, job.exp_name
        assert set(config["kv_cache_config"]) <= KV_CACHE
        assert set(config["speculative_config"]) <= SPECULATIVE
        assert set(config["sparse_attention_config"]) <= SPARSE_M3
        assert set(config["cuda_graph_config"]) <= CUDA_GRAPH
        assert set(config["moe_config"]) <= MOE
    assert seen == 22  # 11 B200 + 11 B300 single-node rows


def test_minimax_trt_configs_meet_the_engines_constraints(tmp_path):
    for _job, config in _configs(tmp_path):
        kv, spec = config["kv_cache_config"], config["speculative_config"]
        sparse = config["sparse_attention_config"]
        # Eagle3 loads a separate draft checkpoint: without it the engine refuses to start
        assert spec["decoding_type"] == "Eagle3" and spec["speculative_model"]
        # MiniMax-M3 does not load without its sparse attention; msa needs the K-only index
        # branch, the fused projection an fp8 main KV cache
        assert sparse["algorithm"] == "minimax_m3" and sparse["implementation"] == "msa"
        assert sparse["sparse_disable_index_value"] is True
        assert sparse["fuse_qkv_index_projection"] is True and kv["dtype"] == "fp8"
        # the recipe's 128-token KV blocks (the sparse selection granularity), not 32
        assert kv["tokens_per_block"] == 128
        assert kv["free_gpu_memory_fraction"] == pytest.approx(0.94)
        assert kv["use_kv_cache_manager_v2"] is True and kv["host_cache_size"] > 0
