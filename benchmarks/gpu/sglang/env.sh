# Sourced from the repository root by the SGLang device scripts (run.sh here, ../qwen3.5/run.sh):
# the offline bundle first on the path, offline hubs, the kernel caches, the output folders and
# the step deadline (DEADLINE in epoch seconds, or BUDGET_S from now; default 560 s).
OUT=${OUT:-/tmp/kvb-out}
W=/tmp/kvb
mkdir -p "$OUT" "$W"
export PYTHONPATH=/tmp/sgsite:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# sglang's JIT kernels (tvm-ffi + nvcc) and triton's: built once per machine, kept across jobs
export TVM_FFI_CACHE_DIR=/tmp/sgjit TRITON_CACHE_DIR=/tmp/sgjit/triton
DEADLINE=${DEADLINE:-$(( $(date +%s) + ${BUDGET_S:-560} ))}
left_s() { echo $(( DEADLINE - $(date +%s) )); }
