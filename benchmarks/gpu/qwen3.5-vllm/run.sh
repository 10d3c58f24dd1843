#!/usr/bin/env bash
# Issue 37 item 6 on the GPU machine: `kvbench run` of recipe.yaml (Qwen3.5-397B-A17B scaled to 8
# layers, dummy weights, MTP) on vLLM 0.26, GPU-resident and with both CPU offloading connectors,
# with the host-memory sampler beside each job and plan vs allocated after it.
#
#   bash benchmarks/gpu/qwen3.5-vllm/run.sh STEP...
#   STEP: ARM:CONC[xN]   one job of arm resident | native | simple at concurrency CONC, N
#                        repeats (--repeat N; repeats already done are skipped)
#         warm           the resident server (`kvbench launch`, the jobs' flags) probed at fixed
#                        prompt lengths by ../probe.py, then stopped: the first start of a fresh
#                        machine JIT-builds the Triton kernels (GDN/FLA, MoE, MTP) into the cache
#                        the later jobs reuse, so they are not in a measured window; and
#                        probe.json gives prefill and decode speed by prompt length for a vLLM
#                        Qwen3.5 engine profile (as ../qwen3.5/run.sh engprobe for SGLang)
#   A step starts only with at least JOB_S (default 240; warm: WARM_S, 150) seconds left before
#   DEADLINE (epoch seconds; default BUDGET_S=560 s from now, ../vllm/env.sh); every step is
#   bounded by the time left, so the call ends inside its 600 s.
#
# Needs the vLLM 0.26 bundle unpacked into /tmp/site (README.md). Every job: the dummy model in
# /tmp/model-q35, --kv-cache-memory-bytes 3 GiB (246 blocks of 2,128 tokens, "GPU KV cache size:
# 335,872 tokens": recipe.yaml says why), --max-model-len 40960, the 42 bounded Claude Code
# sessions of ../vllm/traces for 50 s, outputs capped at 256, the replay profile pinned to
# `none` (each trace from its beginning, no warm-up: session 9's workload of ../qwen3.5/, whose
# default changed under the same command between sessions), and, with EAGER=1 (the default),
# --enforce-eager: no torch.compile or CUDA graphs, so that three jobs fit one call, as the
# SGLang twin ran without CUDA graphs (../qwen3.5/run.sh). EAGER=0 runs vLLM's default.
# --gdn-prefill-backend triton: on sm90 vLLM 0.26 picks FlashInfer's GDN prefill kernel by default
# (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:85-133, imported at the first prefill,
# :174), and the bundle carries no flashinfer (../shared/gpu/vllm-0.26-wheels.txt); Triton/FLA
# is the kernel SGLang ran for the twin.
# Jobs go to /tmp/kvb/results-q35-vllm, per-step files to /tmp/kvb/<step>/ (call.log, run.log,
# run.json, memory.jsonl.gz, pva.txt), and after each step $OUT/kvb.tar.gz holds /tmp/kvb.
# pva.txt: each pool vLLM logged against the job's plan (../qwen3.5/plan_vs_allocated.py), and
# for an offload arm the EngineCore's RSS growth over the resident job of the same
# concurrency, when one ran before it (so run resident first where the RSS row matters).
set -u
[ $# -gt 0 ] || { echo "usage: run.sh STEP..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source "$here/../vllm/env.sh"
M=/tmp/model-q35  # the SGLang twin's directory name: the same dummy model
[ -f $M/config.json ] ||
  python3 -m kvbench dummy-model $M --model qwen3.5-397b-a17b-scaled > /dev/null
RECIPE=(--config-files "$here/recipe.yaml" --runner-config "$here/runners.yaml")
KEY=qwen3.5-bf16-h200-vllm-agentic-mtp
Q35_KV_BYTES=$((3 << 30))
COMMON=(--load-format dummy --model-path $M --engine-arg=--kv-cache-memory-bytes=$Q35_KV_BYTES
        --engine-arg=--max-model-len=40960 --engine-arg=--gdn-prefill-backend=triton)
[ "${EAGER:-1}" = 1 ] && COMMON+=(--engine-arg=--enforce-eager)
RES=$W/results-q35-vllm

warm() {  # kvbench launch of the resident arm; probe.py; stop
  local d=$1 port=30102 t0=$SECONDS
  python3 -m kvbench launch "${RECIPE[@]}" --config-keys $KEY-resident --exp-name \
    qwen3.5_tp1_conc8_kvnone_spec-mtp --port $port "${COMMON[@]}" \
    --ready-timeout $(( $(left_s) - 40 )) --work-dir "$d/server" > "$d/launch.log" 2>&1 & LP=$!
  while kill -0 $LP 2>/dev/null && ! curl -sf 127.0.0.1:$port/health > /dev/null; do
    [ "$(left_s)" -lt 60 ] && break; sleep 2; done
  echo "warm: ready after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  timeout $(( $(left_s) - 20 )) python3 benchmarks/gpu/probe.py --url http://127.0.0.1:$port \
    --model kvbench/qwen3.5-397b-a17b-scaled --tokenizer $M --prompt-tokens 2048 16384 32000 \
    --concurrency 1 --requests 2 --max-tokens 32 --out "$d/probe.json" >> "$d/call.log" 2>&1
  echo "warm: probe rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-after.txt"
  kill -TERM $LP 2>/dev/null; wait $LP
}

for step in "$@"; do
  d=$W/q35v-${step//[:]/-c}
  mkdir -p "$d"
  python3 benchmarks/gpu/vllm/memory.py "$d/memory.jsonl" & MP=$!
  t0=$SECONDS
  arm=${step%%:*} rest=${step#*:}
  conc=${rest%%x*} rep=1
  [ "$rest" != "$conc" ] && rep=${rest#*x}
  case $arm in
    resident) sel=kvnone ;;
    native|simple) sel=kvdram-vllm-$arm ;;
    warm) ;;
    *) echo "unknown arm $arm (resident | native | simple | warm)" >&2; kill $MP; exit 2 ;;
  esac
  if [ "$arm" = warm ]; then
    if [ "$(left_s)" -lt "${WARM_S:-150}" ]; then
      echo "warm: skipped, $(left_s) s left" | tee -a "$d/call.log"
    else
      warm "$d"
    fi
  elif [ "$(left_s)" -lt "${JOB_S:-240}" ]; then
    # a job cut by the deadline costs its whole server start and measures nothing
    echo "$step: skipped, $(left_s) s left, a job takes up to ${JOB_S:-240} s" |
      tee -a "$d/call.log"
  else
    exp=qwen3.5_tp1_conc${conc}_${sel}_spec-mtp
    timeout "$(left_s)" python3 -m kvbench run "${RECIPE[@]}" --config-keys "$KEY-$arm" \
      --exp-name "$exp" --results "$RES" --min-conc "$conc" --max-conc "$conc" \
      --repeat "$rep" --ready-timeout 420 --trace benchmarks/gpu/vllm/traces --duration 50 \
      --max-tokens-cap 256 --profile none "${COMMON[@]}" --no-dashboard --continue-on-error \
      --compress --format json > "$d/run.json" 2> "$d/run.log"
    echo "$step: kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
    kill $MP 2>/dev/null; wait $MP 2>/dev/null; MP=
    gzip -nf "$d/memory.jsonl"
    res_mem=$W/q35v-resident-c$conc/memory.jsonl.gz
    for j in "$RES/$exp"*/; do
      [ -f "$j/server.log" ] || continue
      if [ "$arm" != resident ] && [ -f "$res_mem" ]; then
        python3 benchmarks/gpu/qwen3.5/plan_vs_allocated.py "$j" --memory "$d/memory.jsonl.gz" \
          --resident-memory "$res_mem" >> "$d/pva.txt" 2>&1
      else
        python3 benchmarks/gpu/qwen3.5/plan_vs_allocated.py "$j" >> "$d/pva.txt" 2>&1
      fi
    done
    cat "$d/pva.txt" 2>/dev/null
  fi
  [ -n "${MP:-}" ] && { kill $MP 2>/dev/null; wait $MP 2>/dev/null; gzip -nf "$d/memory.jsonl"; }
  tar czf "$OUT/kvb.tar.gz" -C $W .
done
ls -la "$OUT"
