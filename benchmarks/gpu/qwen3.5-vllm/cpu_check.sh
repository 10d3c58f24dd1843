#!/usr/bin/env bash
# Issue 37 item 6 against vLLM 0.26 on a machine without a GPU (README.md "CPU checks"): the
# vllm-0.26.0 wheel's Python files unzipped (not installed), a venv over the system packages
# with the few modules vLLM 0.26 imports that they lack (versions of
# ../shared/gpu/vllm-0.26-wheels.txt), then
#   1. cpu_check.py on the argv kvbench renders for each arm (run.sh's flags): vLLM's parser
#      and config builder, and once with --no-enable-prefix-caching (what offload then meets);
#   2. vllm_arith.py: vLLM's own block, group, capacity and CPU-pool arithmetic for the plan's
#      numbers (its output is tests/data/vllm-0.26/qwen3.5-*).
# torchvision has no CPU build for this machine's torch: a stand-in module answers the imports
# of the image processor (the GPU image has torchvision).
#   bash benchmarks/gpu/qwen3.5-vllm/cpu_check.sh [WORK_DIR] > benchmarks/gpu/qwen3.5-vllm/cpu_check.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
W=${1:-/tmp/q35vcheck}
mkdir -p "$W"
if [ ! -f "$W/site/vllm/__init__.py" ]; then
  python3 -m pip download -q --no-deps vllm==0.26.0 -d "$W/wheel"
  python3 - "$W" <<'EOF'
import sys, zipfile, glob
w = sys.argv[1]
z = zipfile.ZipFile(glob.glob(f"{w}/wheel/vllm-0.26.0-*.whl")[0])
z.extractall(f"{w}/site", [n for n in z.namelist() if not n.endswith(".so")])
EOF
fi
if [ ! -x "$W/venv/bin/python" ]; then
  python3 -m venv --system-site-packages "$W/venv"
  "$W/venv/bin/pip" install -q --no-deps model_hosting_container_standards==0.1.16 \
    compressed_tensors==0.17.0 loguru==0.7.3 einops
fi
export PYTHONPATH=$repo/src
python3 -m kvbench dummy-model "$W/model" --model qwen3.5-397b-a17b-scaled > /dev/null
K=qwen3.5-bf16-h200-vllm-agentic-mtp
E=(--engine-arg=--kv-cache-memory-bytes=3221225472 --engine-arg=--max-model-len=40960
   --engine-arg=--gdn-prefill-backend=triton --engine-arg=--enforce-eager)  # run.sh's (EAGER=1)
for arm in resident native simple; do
  sel=kvdram-vllm-$arm; [ $arm = resident ] && sel=kvnone
  python3 -m kvbench launch --dry-run --format json --config-files "$here/recipe.yaml" \
    --runner-config "$here/runners.yaml" --config-keys $K-$arm \
    --exp-name "qwen3.5_tp1_conc8_${sel}_spec-mtp" --load-format dummy --model-path "$W/model" \
    "${E[@]}" > "$W/dry-$arm.json"
done
run() { VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 PYTHONPATH=$W/site:$here/../cpu-stubs "$W/venv/bin/python" "$@" \
          2>/dev/null | grep '^{' ; }
for arm in resident native simple; do
  echo "== $arm: the argv kvbench renders"
  python3 -c "import json,shlex,sys; print(shlex.join(json.load(open(sys.argv[1]))[0]['argv']))" \
    "$W/dry-$arm.json"
  echo "== $arm: vLLM 0.26's parser and config"; run "$here/cpu_check.py" "$W/dry-$arm.json"
done
echo "== native with --no-enable-prefix-caching (the last flag wins)"
run "$here/cpu_check.py" "$W/dry-native.json" --no-enable-prefix-caching
for spec in 3 0; do
  echo "== vllm_arith: --kv-cache-memory-bytes 3 GiB, $spec MTP tokens, cpu_bytes_to_use of 22.35 GiB"
  VLLM_TARGET_DEVICE=cpu PYTHONPATH=$W/site "$W/venv/bin/python" "$here/vllm_arith.py" "$W/model" \
    --kv-cache-memory-bytes 3221225472 --num-spec $spec --cpu-bytes 23998129766 \
    --out "$W/arith-$spec.json" > /dev/null 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [d.pop(k) for k in ('groups', 'kv_cache_tensors')]; print(json.dumps(d))" "$W/arith-$spec.json"
done
