# Sourced by run.sh and capacity.sh (from the repository root): the environment every GPU call
# of issues 12 and 17 shares. The vLLM 0.26 bundle is unpacked in /tmp/site; the model
# directory is kvbench's dummy Qwen3-8B; the GPU KV pool is capped so that sessions spill.
OUT=${OUT:-/tmp/kvb-out}
W=/tmp/kvb
mkdir -p "$OUT" /tmp/bin "$W"
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 PATH=/tmp/bin:$PATH
# the bundle is a --target install: no console script, so give `vllm` one
printf '#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n' > /tmp/bin/vllm
chmod +x /tmp/bin/vllm
M=/tmp/model
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3-8b > /dev/null
KV_BYTES=$((6 << 30))   # GPU KV cap: 6 GiB = 2,730 blocks of 16 = 43,680 Qwen3-8B bf16 tokens
GPU_KV_TOKENS=43680
COMMON=(--load-format dummy --model-path $M --engine-arg=--kv-cache-memory-bytes=$KV_BYTES
        --engine-arg=--max-model-len=40960)
# One deadline for the whole device call (10 minutes at most): DEADLINE (epoch seconds) when a
# call runs several scripts, else BUDGET_S seconds from now.
DEADLINE=${DEADLINE:-$(( $(date +%s) + ${BUDGET_S:-560} ))}
left_s() { echo $(( DEADLINE - $(date +%s) )); }
