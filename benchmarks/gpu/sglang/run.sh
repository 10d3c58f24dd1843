#!/usr/bin/env bash
# Issue 25 on the GPU machine: `kvbench run` of the SGLang 0.5.17 arms of recipe.yaml (dummy
# weights, GPU KV capped at the vLLM arms' 43,680 tokens), with the host-memory sampler beside
# each job, and optionally a probe of a resident server for the simulator's sglang profile.
#
#   bash benchmarks/gpu/sglang/run.sh STEP...
#   STEP: ARM:CONC[xN]   one job of arm resident | hicache | selective at concurrency CONC;
#                        xN runs N repeats (--repeat N; repeats already done are skipped)
#         probe          a resident server probed at fixed prompt lengths (probe.json)
#   A step is skipped when less than JOB_S (190) s are left before DEADLINE (epoch seconds;
#   default BUDGET_S=560 s from now).
#   Two GPUs (issue 29): RECIPE=recipe-x2.yaml RUNNERS=benchmarks/gpu/sglang/runners-x2.yaml
#   KEY=qwen3-8b-bf16-h200x2-sglang-agentic-dp- with steps resident:8, selective:12, ...; the
#   DP-attention router needs the sglang-router wheel installed into /tmp/sgsite beside the
#   bundle (.ci/router-requirements.txt pins it; carry it as a wheel, device README).
#
# Needs the bundle of build-bundle.sh unpacked into /tmp/sgsite (smoke.sh does it). Flags beside
# the recipe's, taken by every arm alike (README.md says why): triton attention (the FA3 kernels
# are not carried), PyTorch sampling (flashinfer's sampler JIT-builds), and no prefill CUDA
# graph (`--cuda-graph-backend-prefill disabled`, sglang 0.5.17 srt/server_args.py: capturing 58
# piecewise prefill graphs took 81 s of a 4.5-minute start; decode graphs stay). Jobs go to
# /tmp/kvb/results-sglang, per-step files to /tmp/kvb/<step>/, and $OUT/kvb.tar.gz holds /tmp/kvb.
set -u
[ $# -gt 0 ] || { echo "usage: run.sh STEP..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source "$here/env.sh"
mkdir -p "$W/results-sglang"
M=/tmp/model
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3-8b > /dev/null
C_ARGS=(--config-files "$here/${RECIPE:-recipe.yaml}"
        --runner-config "${RUNNERS:-benchmarks/gpu/vllm/runners.yaml}")
KEY=${KEY:-qwen3-8b-bf16-h200-sglang-agentic-}
E_ARGS=(--load-format dummy --model-path $M --engine-arg=--max-total-tokens=43680
        --engine-arg=--attention-backend=triton --engine-arg=--sampling-backend=pytorch
        --engine-arg=--cuda-graph-backend-prefill=disabled)

probe() {  # a resident server (kvbench launch), probed like the vLLM one (benchmarks/gpu/probe.py)
  local d=$1 port=30100
  python3 -m kvbench launch "${C_ARGS[@]}" --config-keys "${KEY}resident" \
    --max-conc 4 --port $port "${E_ARGS[@]}" --work-dir "$d/server" > "$d/launch.log" 2>&1 & LP=$!
  for _ in $(seq 1 $(( $(left_s) - 60 ))); do
    curl -sf 127.0.0.1:$port/health > /dev/null && break; sleep 1; done
  echo "probe server ready after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-idle.txt"
  timeout $(( $(left_s) - 20 )) python3 benchmarks/gpu/probe.py --url http://127.0.0.1:$port \
    --model Qwen/Qwen3-8B --tokenizer $M --prompt-tokens 128 1024 8192 32000 --concurrency 1 4 \
    --requests 4 --max-tokens 32 --out "$d/probe.json" >> "$d/call.log" 2>&1
  echo "probe rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-after.txt"
  kill -TERM $LP; wait $LP
}

for step in "$@"; do
  d=$W/${step//[:]/-c}
  mkdir -p "$d"
  python3 benchmarks/gpu/vllm/memory.py "$d/memory.jsonl" & MP=$!
  t0=$SECONDS
  if [ "$(left_s)" -lt "${JOB_S:-190}" ]; then
    echo "skipped: $(left_s) s left, a step takes up to ${JOB_S:-190} s (JOB_S)" | tee -a "$d/call.log"
  elif [ "$step" = probe ]; then
    probe "$d"
  else
    arm=${step%%:*}; rest=${step#*:}; conc=${rest%%x*}; rep=1
    [ "$rest" != "$conc" ] && rep=${rest#*x}
    timeout "$(left_s)" python3 -m kvbench run "${C_ARGS[@]}" \
      --config-keys "$KEY$arm" --results "$W/results-sglang" \
      --min-conc "$conc" --max-conc "$conc" --repeat "$rep" \
      --trace benchmarks/gpu/vllm/traces --duration 50 --max-tokens-cap 256 "${E_ARGS[@]}" \
      --no-dashboard --continue-on-error --compress --format json > "$d/run.json" 2> "$d/run.log"
    echo "$step: kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  fi
  kill $MP 2>/dev/null; wait $MP 2>/dev/null; gzip -nf "$d/memory.jsonl"
  tar czf "$OUT/kvb.tar.gz" -C $W .
done
ls -la "$OUT"
