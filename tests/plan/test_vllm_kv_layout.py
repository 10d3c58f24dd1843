"""kvbench's plan of the scaled Qwen3.5 (hybrid GDN + full attention, MTP) on vLLM 0.26 against
vLLM 0.26's own KV-cache arithmetic, run on CPU over the layer specs a GPU worker reports
(tests/data/vllm-0.26/, tests/data/README.md): the attention block raised to hold a GDN state,
the groups and KV tensors, the blocks a --kv-cache-memory-bytes gives, the "GPU KV cache size"
line, and the CPU blocks and pinned tensors of both offloading connectors. The server-log
excerpt holds the lines vLLM logged there and the offload workers' lines in their format
strings; the log parser reads it back against the plan, and reads the real logs of the issue-12
Qwen3-8B runs on vLLM 0.26 against today's plan of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.matrix import Selection, select_jobs
from kvbench.models import load_model
from kvbench.plan import plan_job
from kvbench.plan.footprint import pinned_bytes
from kvbench.plan.vllm_kv import vllm_kv_layout
from kvbench.recipe import load_runners
from kvbench.results.allocation import plan_vs_allocated, vllm_allocation

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "vllm-0.26"
RECIPE = REPO / "benchmarks" / "gpu" / "qwen3.5-vllm" / "recipe.yaml"
MODEL = "kvbench/qwen3.5-397b-a17b-scaled"
GOLDEN = sorted(DATA.glob("qwen3.5-kv-*.json"))
# benchmarks/gpu/qwen3.5-vllm/run.sh: the GPU KV cap and the context of every job
CAP = ["--kv-cache-memory-bytes=3221225472", "--max-model-len=40960"]
CPU_BYTES = 23_998_129_766  # --kv-offloading-size 22.35 GiB, as vLLM multiplies it back


def _golden(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_the_layout_is_vllms(path):
    want = json.loads(path.read_text())
    inputs = want["inputs"]
    layout = vllm_kv_layout(load_model(MODEL), kv_dtype="bf16", attn_tp=1,
                            block_flag=inputs["block_size_flag"], mtp=inputs["num_spec"] > 0)
    assert layout is not None and layout.spec_tokens == inputs["num_spec"]
    assert layout.block_tokens == want["block_size"] == want["mamba_block_size"]
    assert layout.page_bytes == want["attn_page_bytes"] == want["mamba_page_bytes"]
    assert layout.state_bytes == want["mamba_page_bytes_unpadded"]
    assert layout.group_size == max(len(g["layers"]) for g in want["groups"])
    assert layout.tensors == len(want["kv_cache_tensors"])
    assert sum(layout.groups) == len(want["groups"])
    assert layout.block_bytes == want["worker_kv_bytes_per_block"]
    blocks = layout.num_blocks(inputs["kv_cache_memory_bytes"])
    assert blocks == want["num_gpu_blocks"]
    assert layout.capacity_tokens(blocks, inputs["max_model_len"]) == \
        want["gpu_kv_cache_size_tokens"]
    for cpu in want["cpu"]:
        cpu_blocks = cpu["cpu_bytes_to_use"] // layout.block_bytes
        assert cpu_blocks == cpu["native_num_cpu_blocks"] == cpu["simple_num_cpu_blocks"]
        assert [cpu_blocks * layout.page_bytes] * layout.tensors == \
            cpu["native_tensor_bytes"] == cpu["simple_tensor_bytes"]


@pytest.mark.parametrize("path", sorted(DATA.glob("qwen3.5-397b-tp*.json")),
                         ids=lambda p: p.stem)
def test_the_full_size_layout_is_vllms_at_every_tp(path):
    """Qwen3.5-397B-A17B itself (60 layers: 45 GDN in 3 groups of 15, 15 + 1 MTP attention
    layers in one of 16; 16 KV tensors), TP 1-8: the GDN state and the KV heads split over the
    ranks, so the block shrinks with TP (2,128 / 2,128 / 1,072 / 544: at TP 4 and 8 one KV head
    per rank)."""
    want = json.loads(path.read_text())
    inputs = want["inputs"]
    layout = vllm_kv_layout(load_model("qwen3.5-397b-a17b"), kv_dtype="bf16",
                            attn_tp=inputs["tp"], block_flag=inputs["block_size_flag"], mtp=True)
    blocks = layout.num_blocks(inputs["kv_cache_memory_bytes"])
    got = (layout.block_tokens, layout.page_bytes, layout.state_bytes, layout.tensors,
           sum(layout.groups), blocks, layout.capacity_tokens(blocks, inputs["max_model_len"]))
    assert got == (want["block_size"], want["attn_page_bytes"],
                   want["mamba_page_bytes_unpadded"], len(want["kv_cache_tensors"]),
                   len(want["groups"]), want["num_gpu_blocks"], want["gpu_kv_cache_size_tokens"])
    (cpu,) = want["cpu"]
    assert cpu["cpu_bytes_to_use"] // layout.block_bytes == cpu["native_num_cpu_blocks"]


def test_a_dense_model_keeps_its_block_and_one_tensor_per_layer():
    """Qwen3-8B as issue 12 ran it on vLLM 0.26 (benchmarks/results/h200/vllm, server.log:
    "GPU KV cache size: 43,680 tokens", "Allocating 36 CPU tensors...")."""
    layout = vllm_kv_layout(load_model("qwen3-8b"), kv_dtype="bf16", attn_tp=1, block_flag=16,
                            mtp=False)
    assert (layout.block_tokens, layout.tensors) == (16, 36)
    blocks = layout.num_blocks(6 << 30)
    assert blocks == 2730 and layout.capacity_tokens(blocks, 40960) == 43_680


def _plans() -> dict:
    jobs = select_jobs(Selection(config_files=(RECIPE,), min_conc=8, max_conc=8))
    runners = load_runners(RECIPE.parent / "runners.yaml")
    return {j.config_key.rsplit("-", 1)[1]: plan_job(j, runners, engine_args=CAP) for j in jobs}


def test_the_plan_of_each_arm_is_vllms():
    want = _golden("qwen3.5-kv-3221225472-spec3.json")
    (cpu,) = [c for c in want["cpu"] if c["cpu_bytes_to_use"] == CPU_BYTES]
    plans = _plans()
    assert sorted(plans) == ["native", "resident", "simple"]
    for arm, plan in plans.items():
        assert not plan.errors, (arm, plan.errors)
        assert plan.page_size_tokens == want["block_size"]
        assert plan.gpu_kv_tokens == want["gpu_kv_cache_size_tokens"]
        if arm != "resident":
            assert plan.host_kv_tokens == cpu["cpu_tokens"]
    # native pins one tensor per KV tensor, each rounded up to a power of two by torch
    (native,) = plans["native"].host_pools
    assert native.bytes_per_rank == sum(pinned_bytes(b, "pow2") for b in cpu["native_tensor_bytes"])
    (simple,) = plans["simple"].host_pools
    assert simple.bytes_per_rank - CPU_BYTES in (0, 1)  # the flag's bytes, rounded up
    assert plans["simple"].engine_config["kv-transfer-config"]["kv_connector_extra_config"] == \
        {"cpu_bytes_to_use": CPU_BYTES}


def test_the_log_parser_reads_vllms_lines_back_against_the_plan():
    alloc = vllm_allocation((DATA / "qwen3.5-server-excerpt.log").read_text())
    want = _golden("qwen3.5-kv-3221225472-spec3.json")
    assert alloc.device_kv_tokens == want["gpu_kv_cache_size_tokens"]
    assert (alloc.max_model_len, alloc.max_concurrency) == (40960, 8.2)
    assert alloc.cpu_tensors == len(want["kv_cache_tensors"])
    assert alloc.draft_groups == len(want["groups"])
    rows = {r.pool: r for r in plan_vs_allocated(_plans()["simple"].to_json(), alloc)}
    assert rows["device kv"].diff == 0
    assert rows["host kv_offload"].unit == "blocks" and rows["host kv_offload"].diff == 0
    # the worker prints what holds whole blocks, in GiB: within a block of the configured bytes
    size = rows["host kv_offload size"]
    assert size.within == 0 and -want["worker_kv_bytes_per_block"] / 1e9 <= size.diff <= 0


def test_offload_without_prefix_caching_is_refused_with_vllms_reason():
    """cpu_check.txt: with --no-enable-prefix-caching vLLM 0.26 runs the GDN states in mamba
    cache mode "none" (a state block of 40,960 tokens beside the 2,128-token attention block)."""
    jobs = select_jobs(Selection(config_files=(RECIPE,), min_conc=8, max_conc=8))
    runners = load_runners(RECIPE.parent / "runners.yaml")
    for job in jobs:
        plan = plan_job(job, runners, engine_args=[*CAP, "--no-enable-prefix-caching"])
        if job.row["kv-offloading"] == "none":
            assert not plan.errors
        else:
            (error,) = plan.errors
            assert "need --enable-prefix-caching" in error and "disabling CPU offload" in error
    # the last spelling wins, as in vLLM's parser
    (job,) = [j for j in jobs if j.config_key.endswith("native")]
    plan = plan_job(job, runners, engine_args=["--no-enable-prefix-caching",
                                               "--enable-prefix-caching", *CAP])
    assert not plan.errors


@pytest.mark.parametrize("arm", ["native", "simple"])
def test_the_issue_12_logs_of_vllm_026_match_todays_plan(arm):
    """Real vLLM 0.26 server logs (benchmarks/results/h200/vllm/runs/qwen3-8b_tp1_conc4_kvdram-
    vllm-*/server.log, the lines this parser reads) against today's plan of the same job with
    the run's engine flags (benchmarks/gpu/vllm/env.sh): the plan the runs had ignored the GPU
    KV cap (720,384 tokens planned, 43,680 logged)."""
    recipe = REPO / "benchmarks" / "gpu" / "vllm" / "recipe.yaml"
    (job,) = select_jobs(Selection(config_files=(recipe,), min_conc=4, max_conc=4,
                                   config_keys=(f"qwen3-8b-bf16-h200-vllm-agentic-{arm}",)))
    plan = plan_job(job, load_runners(recipe.parent / "runners.yaml"),
                    engine_args=["--kv-cache-memory-bytes=6442450944", "--max-model-len=40960"])
    alloc = vllm_allocation((DATA / f"qwen3-8b-{arm}.excerpt.log").read_text())
    rows = {r.pool: r for r in plan_vs_allocated(plan.to_json(), alloc)}
    assert rows["device kv"].allocated == 43_680 and rows["device kv"].diff == 0
    (pool,) = plan.host_pools
    if arm == "simple":
        assert rows["host kv_offload"].diff == 0  # 10,171 blocks
        assert rows["host kv_offload size"].within == 0
    else:  # one pinned tensor per layer, as logged
        assert alloc.cpu_tensors == 36 and pool.note.count("36 pinned tensors") == 1
