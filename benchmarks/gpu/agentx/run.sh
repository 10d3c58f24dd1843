#!/usr/bin/env bash
# Issue 34 item 4 on the GPU machine: agentx-harness 1.0.12 and `kvbench replay --profile
# agentx` replay the same Weka-format traces against one real SGLang server (ENGINE=vllm: vLLM
# 0.26; dummy Qwen3-8B weights), one after the other, REPEATS times each, the server's prefix
# cache emptied before each run (benchmarks/agentx_oracle.py --url --reset-cache).
#   bash benchmarks/gpu/agentx/run.sh [REPEATS] [DURATION_S] [CONCURRENCY]   (3, 120, 4)
# Needs: the SGLang bundle in /tmp/sgsite (benchmarks/gpu/sglang/README.md) or the vLLM one in
# /tmp/site (benchmarks/gpu/vllm/env.sh), the harness bundle
# parts staged as /tmp/stage/ax-part-* (build-bundle.sh), this checkout. Writes /tmp/axout
# (the oracle's runs, the server log) and tars it into $OUT/agentx.tar.gz (a device call brings
# back 8 files). BUDGET_S (default 560): the oracle is stopped that many seconds after start.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/kvb-out}; REPEATS=${1:-3}; DURATION=${2:-120}; CONC=${3:-4}
deadline=$((SECONDS + ${BUDGET_S:-560}))
W=/tmp/axout
mkdir -p "$OUT" "$W" /tmp/axsite
[ -f /tmp/axsite/aiperf/__init__.py ] || cat /tmp/stage/ax-part-* | xz -d | tar -xf - -C /tmp/axsite
# the harness runs from a venv that sees the bundle's packages, then the image's: the image's
# python3 is itself a venv (/opt/torch/.venv, numpy and torch in it), and a venv made from a
# venv sees only the base interpreter's site, so its site directory is named too (session 12)
[ -d /tmp/axvenv ] || {
  image_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m venv --without-pip --system-site-packages /tmp/axvenv
  printf '/tmp/axsite\n%s\n' "$image_site" > /tmp/axvenv/lib/python3.12/site-packages/axsite.pth; }
# the console script pip would write: aiperf's weka loader starts its workers with the spawn
# method, which imports the main script again; without the __main__ guard every worker started
# a whole aiperf of its own, and those waited on the parent's dataset-cache lock until the
# call's deadline (session 13: 250 s; sessions 12's "stale lock" was this too)
printf '#!/tmp/axvenv/bin/python\nimport sys\nfrom aiperf.cli import app\nif __name__ == "__main__":\n    sys.exit(app())\n' \
  > /tmp/axvenv/bin/aiperf
chmod +x /tmp/axvenv/bin/aiperf
if [ "${ENGINE:-sglang}" = vllm ]; then
  . benchmarks/gpu/vllm/env.sh  # PYTHONPATH=/tmp/site, the `vllm` script, the dummy Qwen3-8B
  W=/tmp/axout M=/tmp/model PORT=8000
  # dev mode serves POST /reset_prefix_cache: each run starts from an empty prefix cache, as
  # on a fresh server (the oracle's --reset-cache)
  VLLM_SERVER_DEV_MODE=1 vllm serve $M --served-model-name Qwen/Qwen3-8B \
    --host 127.0.0.1 --port $PORT \
    --load-format dummy --enable-prompt-tokens-details --enforce-eager --max-model-len 40960 \
    > "$W/server.log" 2>&1 & SP=$!
else
  export PYTHONPATH=/tmp/sgsite:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  export TVM_FFI_CACHE_DIR=/tmp/sgjit TRITON_CACHE_DIR=/tmp/sgjit/triton
  pkill -9 -f '[s]glang' 2>/dev/null  # a server an earlier step left
  M=/tmp/model PORT=30000
  [ -f $M/config.json ] || python3 -m kvbench dummy-model $M --model qwen3-8b > /dev/null
  python3 -m sglang.launch_server --model-path $M --served-model-name Qwen/Qwen3-8B \
    --load-format dummy --attention-backend triton --sampling-backend pytorch --page-size 64 \
    --host 127.0.0.1 --port $PORT > "$W/server.log" 2>&1 & SP=$!
fi
for _ in $(seq 1 600); do
  curl -sf 127.0.0.1:$PORT/health > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1
done
python3 benchmarks/agentx_traces.py /tmp/agentx-traces --traces 8 --seed 7 --scale 1.0
# aiperf's dataset cache: a harness run killed while populating it leaves its lock, and the
# next one waits on it (agentx-harness 1.0.12 aiperf/dataset/mmap_cache_lock.py:114)
rm -rf /root/.cache/aiperf/dataset_mmap
# the harness needs a tokenizer it can load by path with HF_HUB_OFFLINE unset
echo "server up after $SECONDS s" | tee "$W/call.log"
env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE timeout $((deadline - SECONDS)) \
  python3 benchmarks/agentx_oracle.py \
  --traces /tmp/agentx-traces --tokenizer $M --concurrency "$CONC" --duration "$DURATION" \
  --warmup-per-lane 3 --repeats "$REPEATS" --url http://127.0.0.1:$PORT \
  --model Qwen/Qwen3-8B --harness-venv /tmp/axvenv --reset-cache --bodies --out "$W/oracle" 2>&1 \
  | tee "$W/oracle.log"
echo "oracle rc=${PIPESTATUS[0]} after $SECONDS s" | tee -a "$W/call.log"
kill $SP; wait $SP 2>/dev/null
tar czf "$OUT/agentx.tar.gz" -C /tmp axout
