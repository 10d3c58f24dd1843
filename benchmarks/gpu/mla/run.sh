#!/usr/bin/env bash
# Issue 37 item 6 on the GPU machine: `kvbench run` of recipe.yaml (DeepSeek-V3 scaled to 4
# layers, MLA, 64 experts, NextN/MTP, bf16 dummy weights) on SGLang 0.5.17, with the
# host-memory sampler beside each job. Modelled on ../qwen3.5/run.sh.
#
#   bash benchmarks/gpu/mla/run.sh STEP...
#   STEP: probe            the HiCache + MTP arm (conc 8) started as the recipe runs it, GPU
#                          pools uncapped (the planner's device estimate against the engine's),
#                          one chat request through prefill, decode and MTP, /metrics, stopped;
#                          plan_vs_allocated.py on its server.log and plan.json
#         ARM:CONC[xN]     one job of arm resident | hicache at concurrency CONC, N repeats
#                          (--repeat N; repeats already done are skipped); resident-nomtp |
#                          hicache-nomtp: the fallback arms without MTP
#   A step starts only with at least JOB_S (default 200; probe PROBE_S 330) seconds left
#   before DEADLINE (epoch seconds; default BUDGET_S=560 s from now); every step is bounded
#   by the time left, so the call ends inside its 600 s.
#
# Needs the bundle of benchmarks/gpu/sglang/build-bundle.sh unpacked into /tmp/sgsite.
# Flags beside the recipe's, the same for every arm (README.md says why): the triton attention
# backend (SGLang's MLA default on Hopper is fa3, server_args.py:5712-5714, whose
# flash_ops.abi3.so the bundle cuts; flashmla and deep_gemm are not carried either), PyTorch
# sampling, no CUDA graphs (the EAGLE draft's graph capture imports dsa_backend, which imports
# deep_gemm: speculative/eagle_worker_v2.py:414-419, layers/attention/dsa_backend.py:89-90).
# Replay jobs cap the GPU KV pool alike in every arm so that sessions spill: 43,680 tokens (the
# Qwen3-8B and Qwen3.5 arms' cap, in tokens: the same bytes as Qwen3.5's capped pool, 0.09 GB
# at 2,048 B/token fp8, would be 19,400 MLA tokens at 4,608 B/token, below the traces' median
# prompt of 22,799 tokens, max 32,743), 16 running requests; kvbench's planner reads the caps.
# Jobs go to /tmp/kvb/results-mla[-nomtp], per-step files to /tmp/kvb/mla-<step>/, and after
# each step $OUT/kvb.tar.gz holds /tmp/kvb.
# The replay profile is pinned (PROFILE, default agentx): kvbench's default for agentic rows
# changed between sessions 9 and 11 and moved the workload under the same command
# (../../results/h200/qwen3.5/README.md, session 11); PROFILE=none replays as session 9 did.
set -u
[ $# -gt 0 ] || { echo "usage: run.sh STEP..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source "$here/../sglang/env.sh"
M=/tmp/model-dsv3  # /tmp/model and /tmp/model-q35 are the other scripts'
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model deepseek-v3-scaled > /dev/null
RECIPE=(--config-files "$here/recipe.yaml" --runner-config "$here/runners.yaml")
KEY=dsv3-bf16-h200-sglang-agentic-mtp
COMMON=(--load-format dummy --model-path $M --engine-arg=--attention-backend=triton
        --engine-arg=--sampling-backend=pytorch --engine-arg=--disable-cuda-graph)
CAPS=(--engine-arg=--max-total-tokens=43680 --engine-arg=--max-running-requests=16)

probe() {  # kvbench launch of the HiCache + MTP arm, uncapped; one request; stop
  local d=$1 port=30100 t0=$SECONDS
  python3 -m kvbench launch "${RECIPE[@]}" --config-keys $KEY --exp-name \
    dsv3_tp1_conc8_kvdram-hicache_spec-mtp --port $port "${COMMON[@]}" \
    --ready-timeout $(( $(left_s) - 40 )) --work-dir "$d/server" > "$d/launch.log" 2>&1 & LP=$!
  probe_chat $port kvbench/deepseek-v3-scaled "$d" $t0  # ../sglang/env.sh
  kill -TERM $LP 2>/dev/null; wait $LP
  python3 "$here/../qwen3.5/plan_vs_allocated.py" "$d/server" > "$d/pva.txt" 2>&1
  tail -n 12 "$d/pva.txt"
}

for step in "$@"; do
  d=$W/mla-${step//[:]/-c}
  mkdir -p "$d"
  python3 benchmarks/gpu/vllm/memory.py "$d/memory.jsonl" & MP=$!
  t0=$SECONDS
  arm=${step%%:*}
  need=${JOB_S:-200}; [ "$arm" = probe ] && need=${PROBE_S:-330}
  if [ "$(left_s)" -lt "$need" ]; then
    echo "$step: skipped, $(left_s) s left, a step takes up to $need s" | tee -a "$d/call.log"
  elif [ "$arm" = probe ]; then
    probe "$d"
  else
    rest=${step#*:}; conc=${rest%%x*}; rep=1
    [ "$rest" != "$conc" ] && rep=${rest#*x}
    key=$KEY res=$W/results-mla off=dram spec=_spec-mtp
    case $arm in
      resident) off=none ;;
      hicache) ;;
      resident-nomtp) key=dsv3-bf16-h200-sglang-agentic; res=$W/results-mla-nomtp; off=none
                      spec= ;;
      hicache-nomtp) key=dsv3-bf16-h200-sglang-agentic; res=$W/results-mla-nomtp; spec= ;;
      *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    sel=kvdram-hicache; [ $off = none ] && sel=kvnone
    timeout "$(left_s)" python3 -m kvbench run "${RECIPE[@]}" --config-keys "$key" \
      --exp-name "dsv3_tp1_conc${conc}_${sel}${spec}" --results "$res" \
      --min-conc "$conc" --max-conc "$conc" --repeat "$rep" --ready-timeout 420 \
      --trace benchmarks/gpu/vllm/traces --duration 50 --max-tokens-cap 256 \
      --profile "${PROFILE:-agentx}" \
      "${COMMON[@]}" "${CAPS[@]}" --no-dashboard --continue-on-error --compress \
      --format json > "$d/run.json" 2> "$d/run.log"
    echo "$step: kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
    for j in "$res"/dsv3_tp1_conc${conc}_${sel}${spec}*/; do
      [ -f "$j/server.log" ] && python3 "$here/../qwen3.5/plan_vs_allocated.py" "$j" >> "$d/pva.txt" 2>&1
    done
    [ -f "$d/pva.txt" ] && tail -n 12 "$d/pva.txt"
  fi
  kill $MP 2>/dev/null; wait $MP 2>/dev/null; gzip -nf "$d/memory.jsonl"
  tar czf "$OUT/kvb.tar.gz" -C $W .
done
ls -la "$OUT"
