#!/usr/bin/env bash
# The first command of the second device call (README.md): unpack the SGLang 0.5.17 bundle
# staged as /tmp/stage/sg-part-NN into /tmp/sgsite and import, on the GPU, every module the
# Qwen3.5 launch path loads (benchmarks/gpu/sglang/smoke.sh with QWEN35=1), then build the
# dummy model. Takes well under a minute; a broken bundle stops the call here.
set -u
cd "$(dirname "$0")/../../.."
t0=$SECONDS
QWEN35=1 bash benchmarks/gpu/sglang/smoke.sh || { echo "smoke failed after $((SECONDS - t0)) s"; exit 1; }
export PYTHONPATH=/tmp/sgsite:$PWD/src
python3 -m kvbench dummy-model /tmp/model-q35 --model qwen3.5-397b-a17b-scaled || exit 1
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
grep MemTotal /proc/meminfo
echo "unpack + smoke + model: $((SECONDS - t0)) s"
