#!/usr/bin/env bash
# GPU call 2: serve a random-weight Qwen3-8B with `transformers serve` (continuous batching)
# and run `kvbench replay` on bounded real Claude Code traces at concurrency 1, 4 and 16.
# Runs from a folder holding src/ (kvbench merged from the branches), benchmarks/gpu/, whl/
# and traces/ (made by derive_trace.py); writes to $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvbench-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
M=/tmp/qwen3-8b-random
R=/tmp/replay
python3 benchmarks/gpu/build_random_model.py $M > "$OUT/serve.log" 2>&1
python3 -m transformers.cli.transformers serve $M --continuous-batching --device cuda:0 \
  --host 127.0.0.1 --port 8000 --log-level info >> "$OUT/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 240); do curl -sf 127.0.0.1:8000/health > /dev/null && break; sleep 1; done
echo "server ready at ${SECONDS}s" | tee -a "$OUT/call2.log"
nvidia-smi dmon -s um -d 1 > "$OUT/dmon.txt" 2>&1 &
DP=$!
# warm-up outside the measured runs (first-request allocation, kernel selection)
timeout 60 python3 benchmarks/gpu/probe.py --url http://127.0.0.1:8000 --model $M \
  --tokenizer $M --prompt-tokens 256 --concurrency 2 --requests 2 --max-tokens 8 \
  --out /tmp/warmup.json >> "$OUT/call2.log" 2>&1
for C in ${CONCURRENCIES:-1 4 16}; do
  echo "== concurrency $C at ${SECONDS}s" | tee -a "$OUT/call2.log"
  timeout $((${DURATION:-75} + 60)) python3 -m kvbench replay --url http://127.0.0.1:8000 --model $M \
    --tokenizer $M --trace traces --concurrency "$C" --duration "${DURATION:-75}" \
    --output "$R/c$C" --format json > "$R-c$C-summary.json" 2>> "$OUT/call2.log"
  echo "rc=$? at ${SECONDS}s" | tee -a "$OUT/call2.log"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['requests'], \
    {k: s[k]['p50'] for k in ('ttft_ms','tpot_ms')}, s['throughput']['output_tok_s'])" \
    "$R-c$C-summary.json" 2>&1 | tee -a "$OUT/call2.log"
done
kill $DP $SP; wait $SP 2>/dev/null
cp /tmp/replay-c*-summary.json "$R/" 2>/dev/null
tar czf "$OUT/replay.tar.gz" -C /tmp replay
tail -c 300000 "$OUT/serve.log" > "$OUT/serve.tail" && mv "$OUT/serve.tail" "$OUT/serve.log"
