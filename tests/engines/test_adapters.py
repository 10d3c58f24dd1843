"""Adapters on literal rows and plans: every value where it belongs, with its source."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from fixtures.engines_rows import make_job, make_plan

from kvbench.engines import engine_names, get_adapter
from kvbench.errors import EngineError


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _source(spec, flag: str):
    return next(s for s in spec.sources if s.flag == flag)


def test_registry_names_and_unknown_framework():
    assert engine_names() == ["atom", "dynamo", "sglang", "sglang-disagg", "sim", "trtllm",
                              "vllm"]
    assert get_adapter("trt").name == "trtllm"
    # the Dynamo frameworks, and vLLM's multi-node rows, run their srt-slurm recipe
    assert {get_adapter(f).name for f in ("dynamo-vllm", "dynamo-sglang", "dynamo-trt")} == \
        {"dynamo"}
    assert get_adapter("vllm", multinode=True).name == "dynamo"
    assert get_adapter("vllm").name == "vllm"
    with pytest.raises(EngineError, match=r"'tilert'; known: atom, dynamo, sglang, "
                       r"sglang-disagg, sim, trtllm, vllm, dynamo-sglang, dynamo-trt, "
                       r"dynamo-vllm, tensorrt-llm, trt, trt-llm"):
        get_adapter("tilert")


def test_a_dynamo_row_without_its_recipe_is_refused_with_the_runners_reason():
    """InferenceX's srt-slurm runners exit 1 on a row without CONFIG_FILE=; so does kvbench
    (a refusal, as `kvbench launch` lists it), for a multi-node and a single-node row."""
    multi = make_job(framework="dynamo-vllm", prefill={"num-worker": 1, "tp": 4},
                     decode={"num-worker": 1, "tp": 4})
    single = make_job(framework="dynamo-sglang")
    for job in (multi, single):
        with pytest.raises(EngineError, match=r"CONFIG_FILE is not set\. The srt-slurm path "
                           r"requires a CONFIG_FILE in additional-settings\.") as e:
            get_adapter(job.framework, multinode=job.is_multinode).build(job, None, port=1)
        assert e.value.message.startswith(f"{job.exp_name}: a {job.framework} row runs")


def test_sglang_hicache_row_values_and_sources():
    spec = get_adapter("sglang").build(make_job(), make_plan(), port=30000)
    argv = spec.argv
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"] and spec.program_len == 3
    assert _flag(argv, "--model-path") == "Qwen/Qwen3.5-397B-A17B-FP8"
    assert _flag(argv, "--tp-size") == "2" and _flag(argv, "--ep-size") == "2"
    assert _flag(argv, "--port") == "30000" and _flag(argv, "--host") == "127.0.0.1"
    # plan: sizing and offload flags
    assert _flag(argv, "--hicache-size") == "144"
    assert _flag(argv, "--mem-fraction-static") == "0.82"
    assert _flag(argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert "--enable-hierarchical-cache" in argv
    # data rules: concurrency heuristics, per-model and per-hardware settings
    assert _flag(argv, "--max-running-requests") == "112"
    assert _flag(argv, "--cuda-graph-max-bs-decode") == "56"
    assert _flag(argv, "--speculative-algorithm") == "NEXTN"  # Qwen on B300
    assert _flag(argv, "--attention-backend") == "trtllm_mha"
    assert _flag(argv, "--quantization") == "fp8"
    assert spec.env["SGLANG_SIMULATE_ACC_LEN"] == "3.39"
    assert argv.count("--page-size") == 1
    assert _source(spec, "--tp-size").source == "job"
    assert _source(spec, "--hicache-size").source == "plan"
    assert _source(spec, "--max-running-requests").detail.endswith("2 * conc with conc=56")
    assert _source(spec, "--speculative-algorithm").shadowed == [
        "EAGLE (default: sglang data: speculative decoding (EAGLE/MTP))"]
    assert spec.base_url == "http://127.0.0.1:30000"
    assert spec.metrics_url == "http://127.0.0.1:30000/metrics"
    assert spec.router_argv is None and spec.correlation_header is None


def test_sglang_dp_attention_gets_a_router_and_engine_port_behind_it():
    job = make_job(tp=4, ep=4, dp_attn=True, model="deepseek-ai/DeepSeek-V4-Pro",
                   model_prefix="dsv4", precision="fp4", conc=64,
                   router={"name": "sglang-router", "version": "0.3.2"})
    spec = get_adapter("sglang").build(job, make_plan(page_size_tokens=256), port=8888)
    assert _flag(spec.argv, "--port") == "8889"
    assert _flag(spec.argv, "--dp-size") == "4" and "--enable-dp-attention" in spec.argv
    # dsv4_fp4_b300_sglang_mtp.sh's DP branch: 16,384 (not the generic 8192 x dp)
    assert _flag(spec.argv, "--chunked-prefill-size") == "16384"
    # one tokenizer per DP rank, NCCL init on the client port + 2000 (the same launcher)
    assert _flag(spec.argv, "--tokenizer-worker-num") == "4"
    assert _flag(spec.argv, "--dist-init-addr") == "127.0.0.1:10888"
    r = spec.router_argv
    assert r[:3] == ["python3", "-m", "sglang_router.launch_router"]
    assert _flag(r, "--worker-urls") == "http://127.0.0.1:8889"
    # the launcher's router command (dsv4_fp4_b300_sglang_mtp.sh:243-255)
    assert _flag(r, "--policy") == "consistent_hashing" and "--dp-aware" in r
    assert _flag(r, "--connect-timeout-secs") == "900"
    assert _flag(r, "--port") == "8888" and _flag(r, "--request-timeout-secs") == "14400"
    assert spec.base_url == "http://127.0.0.1:8888"
    assert spec.metrics_url == "http://127.0.0.1:8889/metrics"  # the engine's, not the router's
    assert spec.health_url == "http://127.0.0.1:8889/health"
    assert spec.router_health_url == "http://127.0.0.1:8888/health"
    assert spec.correlation_header == "x-smg-routing-key"


def test_accuracy_runs_drop_synthetic_acceptance():
    thr = get_adapter("sglang").build(make_job(), make_plan(), port=1)
    acc = get_adapter("sglang").build(make_job(), make_plan(), port=1, accuracy=True)
    assert "SGLANG_SIMULATE_ACC_LEN" in thr.env
    assert not any(k.startswith("SGLANG_SIMULATE_ACC") for k in acc.env)
    assert _flag(acc.argv, "--speculative-num-steps") == "3"  # speculation itself stays on
    eval_row = get_adapter("sglang").build(make_job(eval_only=True), make_plan(), port=1)
    assert "SGLANG_SIMULATE_ACC_LEN" not in eval_row.env


def test_overrides_beat_everything_and_are_labelled():
    spec = get_adapter("sglang").build(
        make_job(), make_plan(), port=1, model_path="/models/qwen",
        overrides=["--hicache-size", "100", "--watchdog-timeout=60", "--enable-metrics"],
        env_overrides={"NCCL_DEBUG": "INFO"})
    assert _flag(spec.argv, "--hicache-size") == "100"
    assert _source(spec, "--hicache-size").source == "override"
    assert _flag(spec.argv, "--watchdog-timeout") == "60"
    assert _flag(spec.argv, "--model-path") == "/models/qwen"
    assert _source(spec, "--model-path").source == "override"
    assert spec.served_model_name == "Qwen/Qwen3.5-397B-A17B-FP8"
    assert spec.env["NCCL_DEBUG"] == "INFO"


def test_version_from_image_picks_flag_spelling():
    old = get_adapter("sglang").build(make_job(image="lmsysorg/sglang:v0.5.12-cu130"),
                                      make_plan(), port=1)
    assert "--cuda-graph-max-bs" in old.argv and "--cuda-graph-max-bs-decode" not in old.argv
    forced = get_adapter("sglang").build(make_job(image="lmsysorg/sglang:v0.5.12-cu130"),
                                         make_plan(), port=1, engine_version="0.5.23")
    assert "--cuda-graph-max-bs-decode" in forced.argv
    nightly = get_adapter("sglang").build(make_job(image="lmsysorg/sglang:dev-nightly-0820"),
                                          make_plan(), port=1)
    assert "--cuda-graph-max-bs-decode" in nightly.argv


def test_multinode_rows_are_refused_with_a_reason():
    row = make_job().row | {"prefill": {"num-worker": 1}, "decode": {"num-worker": 1}}
    from kvbench.matrix import Job

    job = Job(config_key="k", row=row, scenario="agentic-coding")
    with pytest.raises(EngineError, match="multi-node"):
        get_adapter("sglang").build(job, None, port=1)


def test_vllm_dp_attention_router_and_offload():
    job = make_job(framework="vllm", model="deepseek-ai/DeepSeek-V4-Pro", model_prefix="dsv4",
                   precision="fp4", tp=8, ep=8, dp_attn=True, conc=64,
                   image="vllm/vllm-openai:nightly-dev-x86_64-cu13.0.1-426e59f",
                   kv_offload_backend={"name": "vllm-simple"},
                   router={"name": "vllm-router", "version": "0.1.14"})
    plan = make_plan(framework="vllm", backend="vllm-simple", page_size_tokens=256,
                     mem_fraction_static=0.9,
                     engine_config={"kv-transfer-config": {
                         "kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                         "kv_connector_extra_config": {"cpu_bytes_to_use": 356_117_751_971}}})
    spec = get_adapter("vllm").build(job, plan, port=8000)
    argv = spec.argv
    assert argv[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V4-Pro"]
    assert _flag(argv, "--tensor-parallel-size") == "1"
    assert _flag(argv, "--data-parallel-size") == "8"
    assert _flag(argv, "--max-num-seqs") == "16"  # 2 x 64 / 8 ranks
    assert _flag(argv, "--block-size") == "256" and _flag(argv, "--kv-cache-dtype") == "fp8"
    # the plan's connector and size, with the DSv4 B300 launcher's DEP settings merged in
    # (dsv4_fp4_b300_vllm_mtp.sh:129-158: eager offload under DEP, cross-layer blocks)
    assert json.loads(_flag(argv, "--kv-transfer-config")) == {
        "kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 356_117_751_971,
                                      "enable_cross_layers_blocks": "true",
                                      "lazy_offload": False}}
    assert "--kv-offloading-size" not in argv
    assert '"synthetic_acceptance_length":2.49' in _flag(argv, "--speculative-config")
    assert spec.router_argv[0] == "vllm-router"
    assert _flag(spec.router_argv, "--policy") == "consistent_hash"
    assert _flag(spec.router_argv, "--intra-node-data-parallel-size") == "8"
    assert spec.correlation_header == "x-session-id"
    assert spec.metrics_url == "http://127.0.0.1:8001/metrics"


def test_vllm_mooncake_config_file_from_plan():
    job = make_job(framework="vllm", model_prefix="kimik3", model="moonshotai/Kimi-K3", tp=8,
                   ep=1, kv_offload_backend={"name": "mooncake"})
    plan = make_plan(framework="vllm", backend="mooncake",
                     engine_args=["--kv-transfer-config", '{"kv_connector": "X"}'],
                     engine_env={"MOONCAKE_CONFIG_PATH": "mooncake.json"},
                     engine_config={"mooncake.json": {"global_segment_size": 123}})
    spec = get_adapter("vllm").build(job, plan, port=1)
    assert '"global_segment_size": 123' in spec.files["mooncake.json"]
    assert _flag(spec.argv, "--kv-transfer-config") == '{"kv_connector": "X"}'


def test_trtllm_writes_its_yaml_config_with_plan_host_cache(tmp_path):
    job = make_job(framework="trt", model="nvidia/MiniMax-M3-NVFP4", model_prefix="minimaxm3",
                   precision="fp4", tp=4, ep=1, conc=20, kv_offload_backend={"name": "native"},
                   image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc23.post1")
    plan = make_plan(framework="trt", backend="native", page_size_tokens=32,
                     mem_fraction_static=0.9, engine_args=[],
                     engine_config={"kv_cache_config": {"host_cache_size": 299_750_000_000}})
    spec = get_adapter("trt").build(job, plan, port=8000, work_dir=tmp_path)
    assert spec.argv[:7] == ["mpirun", "-n", "1", "--oversubscribe", "--allow-run-as-root",
                             "trtllm-serve", "nvidia/MiniMax-M3-NVFP4"]
    assert _flag(spec.argv, "--config") == str(tmp_path / "trtllm-config.yaml")
    assert _flag(spec.argv, "--tp_size") == "4"
    config = yaml.safe_load(spec.files["trtllm-config.yaml"])
    assert config["kv_cache_config"]["host_cache_size"] == 299_750_000_000
    assert config["kv_cache_config"]["tokens_per_block"] == 32
    assert config["kv_cache_config"]["enable_block_reuse"] is True
    assert config["max_batch_size"] == 20
    # Eagle3 needs its draft checkpoint (minimaxm3_fp4_b300_trt_mtp.sh speculative_model)
    assert config["speculative_config"] == {"decoding_type": "Eagle3", "max_draft_len": 3,
                                            "speculative_model": "Inferact/MiniMax-M3-EAGLE3-GQA"}
    assert spec.env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "1.78"
    assert spec.metrics_url.endswith("/prometheus/metrics")
    host_src = _source(spec, "kv_cache_config.host_cache_size")
    assert host_src.kind == "file" and host_src.source == "plan"


def test_sim_emits_the_serve_sim_command_line():
    spec = get_adapter("sim").build(make_job(), make_plan(), port=30123)
    argv = spec.argv
    assert argv[:4] == [sys.executable, "-m", "kvbench", "serve-sim"]
    assert _flag(argv, "--model") == "Qwen/Qwen3.5-397B-A17B-FP8"
    assert _flag(argv, "--hardware") == "b300" and _flag(argv, "--tp") == "2"
    assert _flag(argv, "--host-cache-gb") == "144"
    assert _flag(argv, "--gpu-tokens") == "1000000" and _flag(argv, "--page-size") == "64"
    assert _flag(argv, "--write-policy") == "write_through"
    assert _flag(argv, "--port") == "30123"
    assert _flag(argv, "--max-running-requests") == "112"


def test_every_data_file_loads_and_every_rule_is_reachable_by_some_fact():
    from kvbench.engines import dynamo, srt_source
    from kvbench.engines.rules import DATA_DIR, load_engine_data

    # dynamo.yaml holds how srtctl renders a recipe (its own schema), srt_slurm_sources.yaml
    # where the runner scripts clone srt-slurm from: not launch rules
    others = {"dynamo": dynamo.facts, "srt_slurm_sources": srt_source.sources}
    for path in sorted(Path(DATA_DIR).glob("*.yaml")):
        if path.stem in others:
            assert others[path.stem]() is not None
            continue
        data = load_engine_data(path.stem)
        assert data.engine == path.stem
        assert len({r.name for r in data.rules}) == len(data.rules), "rule names must differ"


def test_a_refused_plan_is_the_first_warning():
    plan = make_plan(within_budget=False, errors=["projected 2,683 GB > budget 2,399 GB"],
                     warnings=["pinning may round up"])
    spec = get_adapter("sglang").build(make_job(), plan, port=1)
    assert spec.warnings[:2] == ["plan refused: projected 2,683 GB > budget 2,399 GB",
                                 "pinning may round up"]


def test_only_sglang_with_its_cache_report_counts_an_absent_cached_count_as_zero():
    """SGLang 0.5.17 leaves prompt_tokens_details out of a usage with no cached token when
    --enable-cache-report is on (usage_processor.py, _details_if_cached): the launch tells the
    replay so; vLLM reports the count on every usage."""
    spec = get_adapter("sglang").build(make_job(), make_plan(), port=30000)
    assert "--enable-cache-report" in spec.argv and spec.absent_cached_tokens_are_zero
    vllm = get_adapter("vllm").build(make_job(framework="vllm"), make_plan(), port=30000)
    assert not vllm.absent_cached_tokens_are_zero


def _atom_job(model_prefix: str, model: str, tp: int, conc: int, budget_gb: int):
    offload = {"kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache",
                                                              "version": "0.4.5"}}
    return make_job(framework="atom", model_prefix=model_prefix, model=model,
                    runner="cluster:mi355x-amds", precision="fp4", tp=tp, ep=1,
                    dp_attn=False, conc=conc, total_cpu_dram_gb=budget_gb,
                    image="rocm/atom-dev:nightly_202608201032", spec_decoding="mtp",
                    **(offload if budget_gb else {"kv-offloading": "none",
                                                   "kv-offload-backend": None}))


def test_atom_kimik3_lmcache_row_follows_its_launcher_and_its_plan():
    """kimik3_fp4_mi355x_atom_mtp.sh at CONC 8: the per-concurrency knobs, the launcher's
    flag spelling and LMCache sized per rank by a --sizing budget plan (the launcher's own
    TOTAL / TP oversubscribes this budget: tests/plan/test_launcher_sizing.py)."""
    from kvbench.plan import plan_job

    job = _atom_job("kimik3", "moonshotai/Kimi-K3", tp=8, conc=8, budget_gb=257)
    plan = plan_job(job, sizing="budget")
    assert plan.within_budget, plan.errors
    spec = get_adapter("atom").build(job, plan, port=8888, host="0.0.0.0")
    argv = spec.argv
    assert argv[:4] == ["python3", "-u", "-m", "atom.entrypoints.openai_server"]
    assert _flag(argv, "--server-port") == "8888" and _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--kv_cache_dtype") == "fp8" and "--kv-cache-dtype" not in argv
    assert _flag(argv, "--block-size") == "128"  # settings.yaml: the launcher's --block-size
    assert _flag(argv, "--gpu-memory-utilization") == "0.88"
    assert _flag(argv, "--max-num-seqs") == "16" and _flag(argv, "--state-checkpoint-slots") == "16"
    assert _flag(argv, "--num-speculative-tokens") == "2"
    assert _flag(argv, "--spec-decode-acceptance-length") == "2.51"
    assert _flag(argv, "--kv-transfer-config") == \
        '{"kv_connector":"lmcache_offload","kv_role":"offload"}'
    assert spec.env["ATOM_ENABLE_REPLAYSSM"] == "1" and spec.env["OFFLOAD_STATE"] == "1"
    size = float(spec.env["LMCACHE_MAX_LOCAL_CPU_SIZE"])
    assert size * 2**30 * 8 <= 257e9 - 8e9  # 8 ranks within the budget less 1 GB per rank
    assert _source(spec, "--gpu-memory-utilization").source == "plan"
    assert "renamed from --kv-cache-dtype" in _source(spec, "--kv_cache_dtype").detail


def test_atom_glm_leaves_memory_and_block_size_to_atom_and_accuracy_drops_the_rate():
    from kvbench.plan import plan_job

    job = _atom_job("glm5.2", "amd/GLM-5.2-MXFP4", tp=8, conc=4, budget_gb=0)
    plan = plan_job(job)
    assert {"mem-fraction", "page-size"} <= set(plan.engine_defaults)
    spec = get_adapter("atom").build(job, plan, port=8888)
    assert "--gpu-memory-utilization" not in spec.argv and "--block-size" not in spec.argv
    assert _flag(spec.argv, "--cudagraph-capture-sizes") == "[1,2,4,8]"
    assert _flag(spec.argv, "--spec-decode-acceptance-rate") == "0.663333"
    acc = get_adapter("atom").build(job, plan, port=8888, accuracy=True)
    assert "--spec-decode-acceptance-rate" not in acc.argv
    assert _flag(acc.argv, "--method") == "mtp"
