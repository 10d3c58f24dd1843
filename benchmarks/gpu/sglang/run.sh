#!/usr/bin/env bash
# Issue 12 item 6 on the GPU machine: `kvbench run` of SGLang 0.5.17 arms of recipe.yaml (dummy
# weights, GPU KV capped at the vLLM arms' 43,680 tokens) with the host-memory sampler beside it.
#
#   [RUN_ARGS="--min-conc 6 --max-conc 6"] bash benchmarks/gpu/sglang/run.sh ARM...
#   ARM: hicache | resident. An arm is skipped when less than JOB_S (200) s are left before
#   DEADLINE (epoch seconds; default BUDGET_S=560 s from now).
#
# Needs the bundle of build-bundle.sh unpacked into /tmp/sgsite (smoke.sh does it). Flags beside
# the recipe's (README.md says why): triton attention (the FA3 kernels are not carried), PyTorch
# sampling (flashinfer's sampler JIT-builds). Jobs go to /tmp/kvb/results-sglang, per-call files
# to /tmp/kvb/sglang-<ARM>/, and $OUT/kvb.tar.gz holds everything under /tmp/kvb.
set -u
[ $# -gt 0 ] || { echo "usage: run.sh ARM..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
OUT=${OUT:-/tmp/kvb-out}
W=/tmp/kvb
mkdir -p "$OUT" "$W/results-sglang"
export PYTHONPATH=/tmp/sgsite:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# sglang's JIT kernels (tvm-ffi + nvcc) and triton's: built once per machine, kept across jobs
export TVM_FFI_CACHE_DIR=/tmp/sgjit TRITON_CACHE_DIR=/tmp/sgjit/triton
M=/tmp/model
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3-8b > /dev/null
DEADLINE=${DEADLINE:-$(( $(date +%s) + ${BUDGET_S:-560} ))}
left_s() { echo $(( DEADLINE - $(date +%s) )); }
for arm in "$@"; do
C=$W/sglang-$arm
mkdir -p "$C"
python3 benchmarks/gpu/vllm/memory.py "$C/memory.jsonl" & MP=$!
t0=$SECONDS
if [ "$(left_s)" -lt "${JOB_S:-200}" ]; then
  echo "skipped: $(left_s) s left, a job takes up to ${JOB_S:-200} s (JOB_S)" | tee -a "$C/call.log"
else
  # shellcheck disable=SC2086  # RUN_ARGS is a list of options
  timeout "$(left_s)" python3 -m kvbench run "$here/recipe.yaml" \
    --runner-config benchmarks/gpu/vllm/runners.yaml \
    --config-keys "qwen3-8b-bf16-h200-sglang-agentic-$arm" --results "$W/results-sglang" \
    --trace benchmarks/gpu/vllm/traces --duration 50 --max-tokens-cap 256 \
    --load-format dummy --model-path $M --engine-arg=--max-total-tokens=43680 \
    --engine-arg=--attention-backend=triton --engine-arg=--sampling-backend=pytorch \
    ${RUN_ARGS:-} --no-dashboard --continue-on-error --format json > "$C/run.json" 2> "$C/run.log"
  echo "kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$C/call.log"
fi
kill $MP 2>/dev/null
tar czf "$OUT/kvb.tar.gz" -C $W .
done
ls -la "$OUT"
