#!/usr/bin/env bash
# Issue 37 on the GPU machine: `kvbench run` of recipe.yaml (Qwen3.5-397B-A17B scaled to 8 layers,
# dummy weights, MTP) on SGLang 0.5.17, with the host-memory sampler beside each job.
#
#   bash benchmarks/gpu/qwen3.5/run.sh STEP...
#   STEP: probe            the patched HiCache + MTP arm (conc 8) started as the recipe runs it,
#                          GPU pools uncapped (the planner's device estimate against the
#                          engine's), one chat request through prefill, decode and MTP, stopped:
#                          server.log, plan.json, /metrics; the first start also builds every
#                          JIT and Triton kernel into /tmp/sgjit for the later jobs
#         engprobe         the resident arm (MTP, page 16) with the replay jobs' Mamba and
#                          running caps but room for 4 x 32k prompts, probed at fixed prompt
#                          lengths (benchmarks/gpu/probe.py, as ../sglang/run.sh probes
#                          Qwen3-8B): prefill and decode speed for a Qwen3.5 engine profile
#         ARM:CONC[xN]     one job of arm resident | hicache | unpatched at concurrency CONC,
#                          N repeats (--repeat N; repeats already done are skipped). unpatched:
#                          the HiCache arm without sglang-34560 (seed 000's crash expected);
#                          resident-nomtp | hicache-nomtp: the fallback arms without MTP
#   A step starts only with at least JOB_S (default 200; probe PROBE_S 330) seconds left
#   before DEADLINE (epoch seconds; default BUDGET_S=560 s from now); every step is bounded
#   by the time left, so the call ends inside its 600 s.
#
# Needs the bundle of benchmarks/gpu/sglang/build-bundle.sh unpacked into /tmp/sgsite (unpack.sh).
# Flags beside the recipe's, the same for every arm (README.md says why): triton attention and
# PyTorch sampling (flashinfer JIT-builds both on every fresh machine), no prefill CUDA graph,
# decode graphs up to batch 16. Replay jobs also cap the GPU pools alike in every arm so that
# sessions spill: 43,680 KV tokens (the Qwen3-8B arms' cap), 80 Mamba state slots, 16 running
# requests; kvbench's planner reads the same caps (plan/gpu.py engine_caps). The resident arm
# runs page 16 (seed 000's). The sglang-34560 patch edits /tmp/sgsite in place when a patched
# HiCache job starts; the pristine file is put back before every other step, so the resident
# and unpatched arms run the released 0.5.17 code.
# Jobs go to /tmp/kvb/results-q35[-unpatched], per-step files to /tmp/kvb/<step>/, and after
# each step $OUT/kvb.tar.gz holds /tmp/kvb.
# The replay profile is pinned (PROFILE, default agentx): kvbench's default for agentic rows
# changed between sessions 9 and 11 and moved the workload under the same command
# (../../results/h200/qwen3.5/README.md, session 11); PROFILE=none replays as session 9 did.
set -u
[ $# -gt 0 ] || { echo "usage: run.sh STEP..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source "$here/../sglang/env.sh"
M=/tmp/model-q35  # not /tmp/model: ../sglang/run.sh keeps its Qwen3-8B there
[ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3.5-397b-a17b-scaled > /dev/null
CFG=/tmp/sgsite/sglang/srt/configs/model_config.py
[ -f $CFG.pristine ] || cp $CFG $CFG.pristine
RECIPE=(--config-files "$here/recipe.yaml" --runner-config "$here/runners.yaml")
KEY=qwen3.5-bf16-h200-sglang-agentic-mtp
COMMON=(--load-format dummy --model-path $M --engine-arg=--attention-backend=triton
        --engine-arg=--sampling-backend=pytorch
        --engine-arg=--disable-cuda-graph)
CAPS=(--engine-arg=--max-total-tokens=43680 --engine-arg=--max-mamba-cache-size=80
      --engine-arg=--max-running-requests=16)

probe() {  # kvbench launch of the patched HiCache arm, uncapped; one request; stop
  local d=$1 port=30100 t0=$SECONDS
  python3 -m kvbench launch "${RECIPE[@]}" --config-keys $KEY --exp-name \
    qwen3.5_tp1_conc8_kvdram-hicache_spec-mtp --port $port "${COMMON[@]}" \
    --ready-timeout $(( $(left_s) - 40 )) --work-dir "$d/server" > "$d/launch.log" 2>&1 & LP=$!
  probe_chat $port kvbench/qwen3.5-397b-a17b-scaled "$d" $t0  # ../sglang/env.sh
  kill -TERM $LP 2>/dev/null; wait $LP
  python3 "$here/plan_vs_allocated.py" "$d/server" > "$d/pva.txt" 2>&1
}

engprobe() {  # kvbench launch of the resident arm; probe.py; stop
  local d=$1 port=30101 t0=$SECONDS
  python3 -m kvbench launch "${RECIPE[@]}" --config-keys $KEY --exp-name \
    qwen3.5_tp1_conc4_kvnone_spec-mtp --port $port "${COMMON[@]}" --engine-arg=--page-size=16 \
    --engine-arg=--max-total-tokens=140000 --engine-arg=--max-mamba-cache-size=80 \
    --engine-arg=--max-running-requests=16 \
    --ready-timeout $(( $(left_s) - 40 )) --work-dir "$d/server" > "$d/launch.log" 2>&1 & LP=$!
  probe_ready $port "$d" $t0  # ../sglang/env.sh
  timeout $(( $(left_s) - 20 )) python3 benchmarks/gpu/probe.py --url http://127.0.0.1:$port \
    --model kvbench/qwen3.5-397b-a17b-scaled --tokenizer $M --prompt-tokens 128 1024 8192 32000 \
    --concurrency 1 4 --requests 4 --max-tokens 32 --out "$d/probe.json" >> "$d/call.log" 2>&1
  echo "engprobe: probe rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-after.txt"
  kill -TERM $LP 2>/dev/null; wait $LP
}

for step in "$@"; do
  d=$W/${step//[:]/-c}
  mkdir -p "$d"
  python3 benchmarks/gpu/vllm/memory.py "$d/memory.jsonl" & MP=$!
  t0=$SECONDS
  arm=${step%%:*}
  [ "$arm" = hicache ] || cp $CFG.pristine $CFG  # the released file for every arm but hicache
  need=${JOB_S:-200}; [ "$arm" = probe ] && need=${PROBE_S:-330}
  [ "$arm" = engprobe ] && need=${PROBE_S:-240}
  if [ "$(left_s)" -lt "$need" ]; then
    echo "$step: skipped, $(left_s) s left, a step takes up to $need s" | tee -a "$d/call.log"
  elif [ "$arm" = probe ]; then
    probe "$d"
  elif [ "$arm" = engprobe ]; then
    engprobe "$d"
  else
    rest=${step#*:}; conc=${rest%%x*}; rep=1
    [ "$rest" != "$conc" ] && rep=${rest#*x}
    key=$KEY res=$W/results-q35 off=dram extra=()
    case $arm in
      resident) off=none; extra=(--engine-arg=--page-size=16) ;;
      hicache) ;;
      unpatched) key=$KEY-unpatched; res=$W/results-q35-unpatched ;;
      resident-nomtp) key=qwen3.5-bf16-h200-sglang-agentic; res=$W/results-q35-nomtp; off=none
                      extra=(--engine-arg=--page-size=16) ;;
      hicache-nomtp) key=qwen3.5-bf16-h200-sglang-agentic; res=$W/results-q35-nomtp ;;
      *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    sel=kvdram-hicache; [ $off = none ] && sel=kvnone
    spec=_spec-mtp; case $arm in *-nomtp) spec= ;; esac
    timeout "$(left_s)" python3 -m kvbench run "${RECIPE[@]}" --config-keys "$key" \
      --exp-name "qwen3.5_tp1_conc${conc}_${sel}${spec}" --results "$res" \
      --min-conc "$conc" --max-conc "$conc" --repeat "$rep" --ready-timeout 420 \
      --trace benchmarks/gpu/vllm/traces --duration 50 --max-tokens-cap 256 \
      --profile "${PROFILE:-agentx}" \
      "${COMMON[@]}" "${CAPS[@]}" "${extra[@]}" --no-dashboard --continue-on-error --compress \
      --format json > "$d/run.json" 2> "$d/run.log"
    echo "$step: kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
    for j in "$res"/qwen3.5_tp1_conc${conc}_${sel}${spec}*/; do
      [ -f "$j/server.log" ] && python3 "$here/plan_vs_allocated.py" "$j" >> "$d/pva.txt" 2>&1
    done
  fi
  kill $MP 2>/dev/null; wait $MP 2>/dev/null; gzip -nf "$d/memory.jsonl"
  tar czf "$OUT/kvb.tar.gz" -C $W .
done
ls -la "$OUT"
