#!/usr/bin/env bash
# Issue 17 on the GPU machine: one measured capacity point beside the simulator's prediction.
# `kvbench launch` starts the native-offload row of recipe.yaml (vLLM 0.26, 24 GB CPU pool,
# GPU KV capped as in run.sh) and keeps it up; `kvbench capacity --url` then searches the
# largest number of live sessions meeting TTFT p90 <= 2 s, each probe a replay of the same 8
# multi-turn Claude Code sessions (first 5 turns, think times capped at 1 s), starting from the
# simulated answer (engine profile vllm, fitted from the probe of issue 12, not from these runs).
#
#   bash benchmarks/gpu/vllm/capacity.sh      (after run.sh's staging: /tmp/site holds vLLM)
#
# Writes /tmp/kvb/capacity/ (launch log and server files, capacity.json and .html, one
# directory with result.json per measured step) and $OUT/kvb.tar.gz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
. "$here/env.sh"
C=$W/capacity
mkdir -p "$C"
key=qwen3-8b-bf16-h200-vllm-agentic-native
ROW=(--config-files "$here/recipe.yaml" --runner-config "$here/runners.yaml" --config-keys $key)
t0=$SECONDS
# the conc-12 row: --max-num-seqs 24, room for every concurrency the search may try
python3 -m kvbench launch "${ROW[@]}" --min-conc 12 --host 127.0.0.1 --port 8000 "${COMMON[@]}" \
  --work-dir "$C/server" --ready-timeout 300 > "$C/launch.log" 2>&1 & LP=$!
for _ in $(seq 1 300); do curl -sf 127.0.0.1:8000/health > /dev/null && break
  kill -0 $LP 2>/dev/null || break; sleep 1; done
echo "ready after $((SECONDS - t0)) s" | tee -a "$C/call.log"
TRACES=()
for t in 0019 0121 0165 0289 0387 0438 0460 0507; do
  TRACES+=(--trace "$here/traces/trace_$t.json.gz"); done
timeout "$(left_s)" python3 -m kvbench capacity "${ROW[@]}" --gpu-tokens $GPU_KV_TOKENS \
  "${TRACES[@]}" --max-turns 5 --think-time-cap 1 --max-tokens-cap 256 --ttft-p90-ms 2000 \
  --max-running-requests 24 --host-gb 0 --host-gb 24 --server-host-gb 24 \
  --url http://127.0.0.1:8000 --served-model Qwen/Qwen3-8B --tokenizer $M --output "$C/out" \
  > "$C/capacity.txt" 2> "$C/capacity.log"
echo "kvbench capacity rc=$? after $((SECONDS - t0)) s" | tee -a "$C/call.log"
curl -s 127.0.0.1:8000/metrics > "$C/metrics-after.txt"
# TERM, not INT: a background job of a non-interactive shell ignores SIGINT
kill -TERM $LP; wait $LP
echo "launch rc=$? after $((SECONDS - t0)) s" | tee -a "$C/call.log"
pgrep -af "vllm serve" >> "$C/call.log" || echo "no vllm process left" >> "$C/call.log"
tar czf "$OUT/kvb.tar.gz" -C $W .
ls -la "$OUT"
