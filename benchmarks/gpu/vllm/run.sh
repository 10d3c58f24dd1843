#!/usr/bin/env bash
# Issue 12 on the GPU machine: `kvbench run` of one arm of recipe.yaml against real vLLM 0.26
# (dummy weights, GPU KV capped so the Claude Code sessions spill), with a host-memory sampler
# beside it. The first call of a session also probes a resident vLLM server (prefill / decode
# speed by prompt length, for fitting the simulator's vllm profile) and keeps its /metrics text.
#
#   [RUN_ARGS="--max-conc 4 --repeat 2"] [TAG=x] bash benchmarks/gpu/vllm/run.sh ARM...
#   ARM: probe | resident | native | simple; RUN_ARGS: more `kvbench run` options (a
#   concurrency, repeats); GPU: h200 (default) or h100, the recipe keys' device; PROFILE: the
#   validity profile (default none, the committed
#   runs'); TAG: suffix of the per-call directory (two calls of one arm); RUNS: the workload's
#   results set (default runs-s15, 50 s; runs-s23 is the same sessions for DURATION=150 s). An
#   arm is skipped when less than JOB_S (330) seconds are left before DEADLINE: each job of
#   session 2 took 257-306 s (server start included), and a cut job measures nothing.
#
# Needs the vLLM 0.26 bundle unpacked into /tmp/site (docs/performance.md says how it travels).
# Jobs go to /tmp/kvb/$RUNS (copied from benchmarks/results/h200/vllm/$RUNS on first use:
# the runs of the sessions kvbench replays now, so finished jobs are skipped and `--repeat N`
# adds the missing repeats; results/h200/vllm/runs slept the recorded think_time, another
# workload, which resume re-runs), per-call files to
# /tmp/kvb/<ARM><TAG>/, and $OUT/kvb.tar.gz holds everything under /tmp/kvb so far. The call
# must end inside the device's 10-minute limit: every arm stops at DEADLINE (env.sh).
set -u
[ $# -gt 0 ] || { echo "usage: run.sh ARM..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
. "$here/env.sh"
# GPU=h100 runs the same arms on an H100 (recipe.yaml's h100 keys): another device's runs,
# kept in results/h100/vllm/runs-s15, never mixed with the H200's
GPU=${GPU:-h200}
RUNS=${RUNS:-runs-s15}
seed=benchmarks/results/$GPU/vllm/$RUNS
R=$W/$RUNS
[ -d "$R" ] || { if [ -d "$seed" ]; then cp -r "$seed" "$R"; else mkdir -p "$R"; fi; }
for arm in "$@"; do
C=$W/$arm${TAG:-}
mkdir -p "$C"
python3 "$here/memory.py" "$C/memory.jsonl" & MP=$!
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; free -g; } \
  > "$C/machine.txt" 2>&1
t0=$SECONDS
if [ "$arm" = probe ]; then
  vllm serve $M --served-model-name Qwen/Qwen3-8B --host 127.0.0.1 --port 8000 \
    --load-format dummy --enable-prompt-tokens-details --max-num-seqs 24 --block-size 16 \
    --kv-cache-memory-bytes $KV_BYTES --max-model-len 40960 > "$C/server.log" 2>&1 & SP=$!
  for _ in $(seq 1 300); do curl -sf 127.0.0.1:8000/health > /dev/null && break
    kill -0 $SP 2>/dev/null || break; sleep 1; done
  echo "ready after $((SECONDS - t0)) s" | tee -a "$C/call.log"
  curl -s 127.0.0.1:8000/metrics > "$C/metrics-idle.txt"
  timeout 240 python3 benchmarks/gpu/probe.py --url http://127.0.0.1:8000 --model Qwen/Qwen3-8B \
    --tokenizer $M --prompt-tokens 512 4096 16384 32000 --concurrency 1 4 --requests 4 \
    --max-tokens 64 --out "$C/probe.json" >> "$C/call.log" 2>&1
  curl -s 127.0.0.1:8000/metrics > "$C/metrics-after-probe.txt"
  kill $SP; wait $SP 2>/dev/null
elif [ "$(left_s)" -lt "${JOB_S:-330}" ]; then
  # a job cut by the deadline costs its whole server start and measures nothing
  echo "skipped: $(left_s) s left, a job takes up to ${JOB_S:-330} s (JOB_S)" | tee -a "$C/call.log"
else
  key=qwen3-8b-bf16-$GPU-vllm-agentic-$arm
  # the committed runs predate the AgentX profile and launcher sizing, both now the default
  # for a row with an exp-name: pinning them keeps those runs' fingerprint, so --repeat N adds
  # repeats to them (session 14's ran under agentx-v1 and re-ran r0 and r1: another
  # experiment, kept apart in results/h200/vllm/runs-agentx-v1)
  # shellcheck disable=SC2086  # RUN_ARGS is a list of options
  timeout "$(left_s)" python3 -m kvbench run "$here/recipe.yaml" \
    --runner-config "$here/runners.yaml" --config-keys "$key" --results "$R" \
    --trace "$here/traces" --duration "${DURATION:-50}" --max-tokens-cap 256 "${COMMON[@]}" \
    --profile "${PROFILE:-none}" --sizing budget ${RUN_ARGS:-} \
    --no-dashboard --continue-on-error --compress --format json > "$C/run.json" 2> "$C/run.log"
  echo "kvbench run rc=$? after $((SECONDS - t0)) s" | tee -a "$C/call.log"
fi
kill $MP 2>/dev/null; wait $MP 2>/dev/null; gzip -nf "$C/memory.jsonl"
done
tar czf "$OUT/kvb.tar.gz" -C $W .
ls -la "$OUT"
