#!/usr/bin/env bash
# GPU call 1: calibrate the H200, then start `transformers serve` (continuous batching) on a
# random-weight Qwen3-8B and probe it at a few prompt lengths. Runs from a folder holding
# src/ (kvbench), benchmarks/gpu/ and whl/ (the wheels the GPU image lacks); writes to $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kvbench-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{ nvidia-smi; nvidia-smi -q | grep -i -A3 'link'; free -g; nproc;
  python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)";
} > "$OUT/machine.txt" 2>&1
SHAPE="--num-layers 36 --hidden-size 4096 --num-heads 32 --num-kv-heads 8 --head-dim 128"
SHAPE="$SHAPE --intermediate-size 12288"
# shellcheck disable=SC2086
time python3 -m kvbench calibrate -o "$OUT/h200-measured.yaml" --name h200-measured --base h200 \
  $SHAPE --page-size 16 --page-size 64 --page-size 256 2>&1 | tee "$OUT/calibrate.log"
M=/tmp/qwen3-8b-random
python3 benchmarks/gpu/build_random_model.py $M > "$OUT/serve.log" 2>&1
python3 -m transformers.cli.transformers serve $M --continuous-batching --device cuda:0 \
  --host 127.0.0.1 --port 8000 --log-level info >> "$OUT/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 240); do curl -sf 127.0.0.1:8000/health > /dev/null && break; sleep 1; done
echo "ready after ${SECONDS}s" >> "$OUT/serve.log"
timeout 240 python3 benchmarks/gpu/probe.py --url http://127.0.0.1:8000 --model $M \
  --tokenizer $M --prompt-tokens 128 1024 8192 32768 --concurrency 1 4 --requests 4 \
  --max-tokens 32 --out "$OUT/probe.json" 2>&1 | tee "$OUT/probe.log"
nvidia-smi >> "$OUT/probe.log" 2>&1
kill $SP; wait $SP 2>/dev/null
tail -c 200000 "$OUT/serve.log" > "$OUT/serve.tail" && mv "$OUT/serve.tail" "$OUT/serve.log"
