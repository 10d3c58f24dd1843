#!/usr/bin/env bash
# First SGLang command on the GPU machine: unpack the bundle that build-bundle.sh wrote (staged as
# /tmp/stage/sg-part-NN, and optionally /tmp/stage/sg-fa3-part-NN) into /tmp/sgsite, then import
# the modules `python3 -m sglang.launch_server` loads for a Qwen3 dense model with HiCache, on
# the GPU, and print the versions. Takes well under a minute, so a broken bundle costs little.
#   [SMOKE_JIT=1] [QWEN35=1] bash benchmarks/gpu/sglang/smoke.sh     (from the repository root)
# SMOKE_JIT=1 also builds one of sglang's JIT kernels (nvcc through tvm-ffi) and times it.
# QWEN35=1 also imports the Qwen3.5 path (issue 37): the hybrid GDN model and its MTP draft,
# the GDN attention backend and its Triton (FLA) kernels, the MoE layer, the EAGLE v2 worker,
# the hybrid HiCache pools, and checks the sgl_kernel ops they call (causal_conv1d, MoE
# routing, speculative tree ops).
set -u
S=/tmp/sgsite
if [ ! -f $S/sglang/__init__.py ]; then
  mkdir -p $S
  cat /tmp/stage/sg-part-* | xz -d -T0 | tar -xf - -C $S || { echo "unpack failed"; exit 1; }
  if ls /tmp/stage/sg-fa3-part-* > /dev/null 2>&1; then
    cat /tmp/stage/sg-fa3-part-* | xz -d -T0 | tar -xf - -C $S || { echo "fa3 unpack failed"; exit 1; }
  fi
fi
du -sm $S
export PYTHONPATH=$S:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/sgjit} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/sgjit/triton}
t0=$SECONDS
python3 - <<'EOF'
import importlib, os, time, traceback
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0),
      "cc", torch.cuda.get_device_capability(0),
      # torch >= 2.10 has it; without it tvm-ffi builds a torch addon with nvcc on import
      "dlpack_c_exchange_api", hasattr(torch.Tensor, "__dlpack_c_exchange_api__"))
failed = []
for name in [
    "sgl_kernel",                      # loads sgl_kernel/sm90/common_ops on compute capability 9.0
    "flashinfer", "flashinfer.sampling", "tvm_ffi", "xgrammar", "transformers",
    "sglang.srt.server_args", "sglang.launch_server", "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.qwen3", "sglang.srt.layers.sampler",
    "sglang.srt.layers.attention.triton_backend", "sglang.srt.mem_cache.hiradix_cache",
    "sglang.srt.mem_cache.pool_host.mha", "sglang.srt.managers.cache_controller",
] + ([
    "sglang.srt.models.qwen3_5", "sglang.srt.models.qwen3_5_mtp",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.layers.attention.linear.gdn_backend",
    "sglang.srt.layers.attention.mamba.causal_conv1d",
    "sglang.kernels.ops.attention.fla.chunk", "sglang.kernels.ops.attention.fla.fused_recurrent",
    "sglang.kernels.ops.mamba.causal_conv1d_triton",
    "sglang.srt.layers.moe.fused_moe_triton.layer", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler",
    "sglang.srt.mem_cache.memory_pool_host", "sglang.srt.multimodal.processors.qwen_vl",
] if os.environ.get("QWEN35") == "1" else []):
    t = time.time()
    try:
        m = importlib.import_module(name)
        v = getattr(m, "__version__", "")
        print(f"ok   {name} {v} ({time.time() - t:.1f} s)")
    except BaseException as e:  # noqa: BLE001 - report every module, then fail
        failed.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        traceback.print_exc(limit=3)
try:
    import sgl_kernel.flash_attn  # noqa: F401 - present only with the fa3 parts
    print("fa3: sgl_kernel.flash_attn loads (--attention-backend fa3 possible)")
except BaseException as e:  # noqa: BLE001
    print(f"fa3: not available ({type(e).__name__}); use --attention-backend triton")
# HiCache's fallback io when its JIT kernel cannot be built (pool_host/mha.py)
ops = [o for o in ("transfer_kv_per_layer_pf_lf", "transfer_kv_all_layer_lf_pf", "transfer_kv_direct")
       if not hasattr(torch.ops.sgl_kernel, o)]
print("sgl_kernel hicache io ops:", "ok" if not ops else f"MISSING {ops}")
failed += ops
if os.environ.get("QWEN35") == "1":
    q = [o for o in ("causal_conv1d_fwd", "causal_conv1d_update", "topk_softmax",
                     "moe_align_block_size", "moe_sum_reduce", "build_tree_kernel_efficient",
                     "verify_tree_greedy", "gemma_rmsnorm", "gemma_fused_add_rmsnorm")
         if not hasattr(torch.ops.sgl_kernel, o)]
    print("sgl_kernel qwen3.5 ops:", "ok" if not q else f"MISSING {q}")
    failed += q
if os.environ.get("SMOKE_JIT") == "1":
    # one tvm-ffi + nvcc build, as the first server start does for every JIT kernel
    from sglang.kernels.ops.kvcache.hicache import can_use_hicache_jit_kernel
    t = time.time()
    ok = can_use_hicache_jit_kernel(element_size=8 * 128 * 2)  # Qwen3-8B: 8 KV heads x 128 x bf16
    print(f"jit hicache kernel: {ok} ({time.time() - t:.1f} s, cache {os.environ.get('TVM_FFI_CACHE_DIR')})")
raise SystemExit(1 if failed else 0)
EOF
rc=$?
echo "imports rc=$rc after $((SECONDS - t0)) s"
python3 -m sglang.launch_server --help 2>&1 | head -15
echo "help rc=${PIPESTATUS[0]} after $((SECONDS - t0)) s"
exit $rc
