"""vLLM 0.26's own KV-cache arithmetic for the scaled Qwen3.5 (hybrid GDN + full attention, MTP),
run on CPU: the numbers kvbench's planner is checked against (tests/data/vllm-0.26/qwen3.5-*).

    VLLM_TARGET_DEVICE=cpu PYTHONPATH=/tmp/vllm026 \
        python benchmarks/gpu/qwen3.5-vllm/vllm_arith.py MODEL_DIR \
        --kv-cache-memory-bytes 3221225472 --num-spec 3 --cpu-bytes N... --out out.json

/tmp/vllm026 is the unzipped vllm-0.26.0 wheel (`pip download --no-deps vllm==0.26.0`). Nothing
here re-implements vLLM: every number comes from a vLLM 0.26 function called on the layer specs a
GPU worker would report for this model, with what a GPU run decides given as inputs:
- the attention backend is FLASH_ATTN (what vLLM 0.26 picked on the H200 in every issue-12 run:
  "Using FLASH_ATTN attention backend", benchmarks/results/h200/vllm/runs/*/server.log);
- `--enable-prefix-caching` (kvbench's vLLM adapter passes it) makes Qwen3.5's mamba cache mode
  "align" (model_executor/models/config.py:558-563: Qwen3.5 does not implement
  SupportsMambaPrefixCaching);
- the layers: each `linear_attention` layer of text_config is a GDN MambaSpec, each
  `full_attention` layer and each of the `mtp_num_hidden_layers` MTP layers
  (models/qwen3_5_mtp.py:107-109, layer_type="full_attention") a FullAttentionSpec.
The model class's two state methods (models/qwen3_5.py:523-553) are called through vLLM's
calculators directly (importing the model module needs torchvision, absent on CPU here)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--kv-cache-memory-bytes", type=int, required=True)
    ap.add_argument("--num-spec", type=int, default=3)
    ap.add_argument("--max-model-len", type=int, default=40960)
    ap.add_argument("--block-size", type=int, default=16, help="the --block-size passed")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    ap.add_argument("--num-layers", type=int,
                    help="the same shape with this many layers, full attention every "
                    "full_attention_interval (60: Qwen3.5-397B-A17B itself)")
    ap.add_argument("--cpu-bytes", type=int, nargs="*", default=[],
                    help="cpu_bytes_to_use values to size the CPU pools for")
    ap.add_argument("--out", type=Path, help="write the JSON here (vLLM logs to stdout)")
    ap.add_argument("--log-out", type=Path,
                    help="write a server-log excerpt: the lines vLLM logged here, and the "
                    "offload workers' lines formatted with their format strings")
    a = ap.parse_args()

    import torch
    import vllm
    import vllm.config.vllm as vcfg
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # no GPU here; the arithmetic is platform-free
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
    from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler

    text = json.loads((a.model_dir / "config.json").read_text())["text_config"]
    if a.num_layers:
        every = text["full_attention_interval"]
        text["num_hidden_layers"] = a.num_layers
        text["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                               for i in range(a.num_layers)]
    tp = a.tp
    parallel = SimpleNamespace(tensor_parallel_size=tp, decode_context_parallel_size=1)
    cache = SimpleNamespace(
        cache_dtype="auto", block_size=a.block_size, user_specified_block_size=True,
        mamba_block_size=None, user_specified_mamba_block_size=False,
        mamba_cache_mode="align", mamba_page_size_padded=None, num_gpu_blocks_override=None,
        enable_prefix_caching=True, mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype=text.get("mamba_ssm_dtype", "auto"),
        kv_cache_dtype_skip_layers=None)
    model = SimpleNamespace(
        dtype=torch.bfloat16, use_mla=False, architecture="Qwen3_5MoeForConditionalGeneration",
        hf_text_config=SimpleNamespace(**text), max_model_len=a.max_model_len,
        original_max_model_len=a.max_model_len, is_hybrid=True,
        # config/model.py get_num_kv_heads: at least one KV head per rank
        get_num_kv_heads=lambda p: max(1, text["num_key_value_heads"] // p.tensor_parallel_size),
        get_head_size=lambda: text["head_dim"])
    spec_cfg = SimpleNamespace(num_speculative_tokens=a.num_spec) if a.num_spec else None
    cfg = SimpleNamespace(cache_config=cache, model_config=model, parallel_config=parallel,
                          speculative_config=spec_cfg, kv_transfer_config=None,
                          scheduler_config=SimpleNamespace(
                              disable_hybrid_kv_cache_manager=False))

    def shape(vllm_config):  # models/qwen3_5.py:534-553
        h = vllm_config.model_config.hf_text_config
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp, h.linear_num_key_heads, h.linear_num_value_heads, h.linear_key_head_dim,
            h.linear_value_head_dim, h.linear_conv_kernel_dim, a.num_spec)

    def dtype(vllm_config):  # models/qwen3_5.py:523-531
        c = vllm_config.cache_config
        return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            vllm_config.model_config.dtype, c.mamba_cache_dtype, c.mamba_ssm_cache_dtype)

    qwen = SimpleNamespace(get_mamba_state_shape_from_config=shape,
                           get_mamba_state_dtype_from_config=dtype)
    ModelRegistry.resolve_model_cls = lambda *args, **kw: (qwen, model.architecture)
    vcfg.set_current_vllm_config = lambda *args, **kw: contextlib.nullcontext()

    # platforms/interface.py:765-892: the attention block raised until a page holds a state
    Platform._align_hybrid_block_size(cfg, FlashAttentionBackend)

    # the specs the layers report (layers/mamba/abstract.py:45-61, attention get_kv_cache_spec)
    attn = FullAttentionSpec(block_size=cache.block_size,
                             num_kv_heads=model.get_num_kv_heads(parallel),
                             head_size=text["head_dim"], dtype=torch.bfloat16)
    mamba = MambaSpec(shapes=tuple(shape(cfg)), dtypes=dtype(cfg),
                      block_size=cache.mamba_block_size,
                      page_size_padded=cache.mamba_page_size_padded,
                      mamba_cache_mode=cache.mamba_cache_mode, num_speculative_blocks=a.num_spec)
    specs = {}
    for i, kind in enumerate(text["layer_types"]):
        specs[f"model.layers.{i}"] = attn if kind == "full_attention" else mamba
    for j in range(text.get("mtp_num_hidden_layers", 0) if a.num_spec else 0):
        specs[f"mtp.layers.{j}"] = attn

    records: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = records.append
    logging.getLogger("vllm").addHandler(catcher)
    (kv,) = kcu.get_kv_cache_configs(cfg, [specs], [a.kv_cache_memory_bytes])
    tokens, concurrency = kcu.get_kv_cache_capacity(cfg, kv)
    worker_bytes_per_block = sum(t.size for t in kv.kv_cache_tensors) // kv.num_blocks
    out = {
        "vllm": vllm.__version__,
        "inputs": {"kv_cache_memory_bytes": a.kv_cache_memory_bytes, "num_spec": a.num_spec,
                   "tp": tp, "num_layers": len(text["layer_types"]),
                   "max_model_len": a.max_model_len, "block_size_flag": a.block_size,
                   "backend": "FLASH_ATTN", "mamba_cache_mode": cache.mamba_cache_mode},
        "block_size": cache.block_size,
        "mamba_block_size": cache.mamba_block_size,
        "attn_page_bytes": attn.page_size_bytes,
        "mamba_page_bytes_unpadded": MambaSpec(shapes=mamba.shapes, dtypes=mamba.dtypes,
                                               block_size=1).page_size_bytes,
        "mamba_page_bytes": mamba.page_size_bytes,
        "groups": [{"kind": type(g.kv_cache_spec).__name__, "layers": list(g.layer_names),
                    "block_size": g.kv_cache_spec.block_size} for g in kv.kv_cache_groups],
        "num_gpu_blocks": kv.num_blocks,
        "kv_cache_tensors": [{"size": t.size, "shared_by": list(t.shared_by)}
                             for t in kv.kv_cache_tensors],
        "worker_kv_bytes_per_block": worker_bytes_per_block,
        "gpu_kv_cache_size_tokens": tokens,  # the "GPU KV cache size: %s tokens" line
        "max_concurrency": concurrency,
        "cpu": [],
    }
    for cpu_bytes in a.cpu_bytes:
        # native: v1/kv_offload/cpu/spec.py:88-105 (blocks_per_chunk 1, alignment 1, world 1)
        # and gpu_worker.py:486-501, one pinned (blocks x page) tensor per KV cache tensor
        native_blocks = cpu_bytes // worker_bytes_per_block
        # simple: v1/simple_kv_offload/manager.py:180-215 (scheduler side)
        simple = SimpleCPUOffloadScheduler._derive_cpu_config(kv, cpu_bytes)
        out["cpu"].append({
            "cpu_bytes_to_use": cpu_bytes,
            "native_num_cpu_blocks": native_blocks,
            "native_tensor_bytes": [native_blocks * (t.size // kv.num_blocks)
                                    for t in kv.kv_cache_tensors],
            "simple_num_cpu_blocks": simple.num_blocks,
            "simple_tensor_bytes": [t.size for t in simple.kv_cache_tensors],
            "cpu_tokens": native_blocks * cache.block_size,
        })
    if a.log_out:
        lines = [f"(EngineCore pid=1) INFO [{r.filename}:{r.lineno}] {r.getMessage()}"
                 for r in records if "KV cache" in r.getMessage()
                 or "concurrency" in r.getMessage()]
        groups = list(range(len(kv.kv_cache_groups)))
        cpu = out["cpu"][0] if out["cpu"] else None
        # the offload paths' own format strings (they need a GPU to run), with their lines
        formatted = []
        if a.num_spec:  # distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:194
            formatted.append(("scheduler.py:194", "KV offloading: EAGLE/MTP draft attention "
                              "groups %s detected. The trailing chunk of these groups will be "
                              "excluded from offloading due to volatility.", (groups,)))
        # v1/kv_offload/cpu/gpu_worker.py:480
        formatted.append(("gpu_worker.py:480", "Allocating %d CPU tensors...",
                          (len(kv.kv_cache_tensors),)))
        if cpu:  # v1/simple_kv_offload/worker.py:148-154
            blocks = cpu["simple_num_cpu_blocks"]
            formatted.append(("worker.py:148", "SimpleCPUOffloadWorker: %d unique GPU KV "
                              "tensors, allocating %d CPU blocks (%.2f GB)",
                              (len(kv.kv_cache_tensors), blocks,
                               blocks * worker_bytes_per_block / 1024**3)))
        lines += [f"(EngineCore pid=1) INFO [{where}] {fmt % args}"  # vLLM's own % formats
                  for where, fmt, args in formatted]
        a.log_out.write_text("\n".join(lines) + "\n")
    rendered = json.dumps(out, indent=1) + "\n"
    if a.out:
        a.out.write_text(rendered)
    else:
        sys.stdout.write(rendered)


if __name__ == "__main__":
    main()
