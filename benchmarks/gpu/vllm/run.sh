#!/usr/bin/env bash
# Issue 12 on the GPU machine: `kvbench run` of one arm of recipe.yaml against real vLLM 0.26
# (dummy weights, GPU KV capped so the Claude Code sessions spill), with a host-memory sampler
# beside it. The first call of a session also probes a resident vLLM server (prefill / decode
# speed by prompt length, for fitting the simulator's vllm profile) and keeps its /metrics text.
#
#   bash benchmarks/gpu/vllm/run.sh ARM...     ARM: probe | resident | native | simple
#
# Needs the vLLM 0.26 bundle unpacked into /tmp/site (docs/performance.md says how it travels).
# Writes /tmp/kvb/<ARM>/ and $OUT/kvb.tar.gz (everything under /tmp/kvb so far). The whole call
# must end inside the device's 10-minute limit: each arm gets what is left of BUDGET_S (default 560 s).
set -u
[ $# -gt 0 ] || { echo "usage: run.sh ARM..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
OUT=${OUT:-/tmp/kvb-out}
W=/tmp/kvb
mkdir -p "$OUT" /tmp/bin
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 PATH=/tmp/bin:$PATH
# the bundle is a --target install: no console script, so give `vllm` one
printf '#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n' > /tmp/bin/vllm
chmod +x /tmp/bin/vllm
M=/tmp/model
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3-8b > /dev/null
KV_BYTES=$((6 << 30))   # GPU KV cap: 6 GiB = 43,690 tokens of Qwen3-8B bf16 KV
COMMON=(--engine-arg=--kv-cache-memory-bytes=$KV_BYTES --engine-arg=--max-model-len=40960)
for arm in "$@"; do
mkdir -p "$W/$arm"
python3 "$here/memory.py" "$W/$arm/memory.jsonl" & MP=$!
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; free -g; } \
  > "$W/$arm/machine.txt" 2>&1
t0=$SECONDS
if [ "$arm" = probe ]; then
  vllm serve $M --served-model-name Qwen/Qwen3-8B --host 127.0.0.1 --port 8000 \
    --load-format dummy --enable-prompt-tokens-details --max-num-seqs 24 --block-size 16 \
    --kv-cache-memory-bytes $KV_BYTES --max-model-len 40960 > "$W/$arm/server.log" 2>&1 & SP=$!
  for _ in $(seq 1 300); do curl -sf 127.0.0.1:8000/health > /dev/null && break
    kill -0 $SP 2>/dev/null || break; sleep 1; done
  echo "ready after $((SECONDS - t0)) s" | tee -a "$W/$arm/call.log"
  curl -s 127.0.0.1:8000/metrics > "$W/$arm/metrics-idle.txt"
  timeout 240 python3 benchmarks/gpu/probe.py --url http://127.0.0.1:8000 --model Qwen/Qwen3-8B \
    --tokenizer $M --prompt-tokens 512 4096 16384 32000 --concurrency 1 4 --requests 4 \
    --max-tokens 64 --out "$W/$arm/probe.json" >> "$W/$arm/call.log" 2>&1
  curl -s 127.0.0.1:8000/metrics > "$W/$arm/metrics-after-probe.txt"
  kill $SP; wait $SP 2>/dev/null
else
  key=qwen3-8b-bf16-h200-vllm-agentic-$arm
  timeout $((${BUDGET_S:-560} - SECONDS)) python3 -m kvbench run "$here/recipe.yaml" --runner-config "$here/runners.yaml" \
    --config-keys "$key" --results "$W/results" --trace "$here/traces" --duration 50 \
    --max-tokens-cap 256 --load-format dummy --model-path $M "${COMMON[@]}" \
    --no-dashboard --continue-on-error --format json > "$W/$arm/run.json" 2> "$W/$arm/run.log"
  echo "kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$W/$arm/call.log"
fi
kill $MP 2>/dev/null
done
tar czf "$OUT/kvb.tar.gz" -C $W .
ls -la "$OUT"
