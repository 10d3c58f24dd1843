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
# A probe's server (kvbench launch in the background, pid $LP, on PORT): wait until it is
# ready or the deadline nears, save /metrics before and after one chat request of MODEL
# through prefill and decode, into folder D (call.log says what happened; T0: $SECONDS at start)
probe_ready() {  # PORT DIR T0: wait for the server launched as $LP; /metrics idle
  local port=$1 d=$2 t0=$3
  while kill -0 $LP 2>/dev/null && ! curl -sf 127.0.0.1:$port/health > /dev/null; do
    [ "$(left_s)" -lt 40 ] && break; sleep 2; done
  if curl -sf 127.0.0.1:$port/health > /dev/null; then
    echo "probe: ready after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  else
    echo "probe: not ready after $((SECONDS - t0)) s (launch.log says why)" | tee -a "$d/call.log"
  fi
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-idle.txt"
}

probe_chat() {  # PORT MODEL DIR T0: probe_ready, one chat request, /metrics after
  local port=$1 model=$2 d=$3 t0=$4
  probe_ready $port "$d" $t0
  curl -s -m 60 127.0.0.1:$port/v1/chat/completions -H 'content-type: application/json' -d \
    '{"model":"'"$model"'","max_tokens":64,"messages":[{"role":"user","content":"the model cache token file server data path list the of and to in is"}]}' \
    > "$d/chat.json"; echo "probe: chat rc=$? after $((SECONDS - t0)) s" | tee -a "$d/call.log"
  curl -s 127.0.0.1:$port/metrics > "$d/metrics-after.txt"
}
