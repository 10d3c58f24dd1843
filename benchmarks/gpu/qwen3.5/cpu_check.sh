#!/usr/bin/env bash
# Issue 37's checks against SGLang 0.5.17 on a machine without a GPU (README.md "CPU checks"):
# the bundle's wheels (benchmarks/gpu/sglang/wheels.txt) for cp311 with the bundle's cuts in a
# clean venv (no system site-packages), the image's packages beside them, then cpu_check.py on
# the dummy Qwen3.5 directory and on the argv kvbench renders for the resident and HiCache steps,
# patched and not. The image's torchvision has no CPU build for this torch here: a stand-in
# module answers its imports (only the tokenizer check reaches it, through the image processor).
#   bash benchmarks/gpu/qwen3.5/cpu_check.sh [WORK_DIR]      (default /tmp/q35check)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
W=${1:-/tmp/q35check}
mkdir -p "$W"
plat=()
for p in manylinux1 manylinux2010 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 \
         manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  plat+=(--platform "${p}_x86_64"); done
py=(--only-binary=:all: --python-version 3.11 --implementation cp "${plat[@]}")
if [ ! -d "$W/site/sglang" ]; then
  grep -v -e '^#' -e '^$' "$repo/benchmarks/gpu/sglang/wheels.txt" > "$W/reqs.txt"
  python3 -m pip download -q --no-deps "${py[@]}" -d "$W/wheels" -r "$W/reqs.txt"
  python3 -m pip install -q --no-deps --no-compile --target "$W/site" "${py[@]}" "$W"/wheels/*.whl
  s=$W/site  # the cuts of build-bundle.sh
  rm -rf "$s/sgl_kernel/sm100" "$s/sgl_kernel/flash_ops.abi3.so" "$s/sgl_kernel/flashmla_ops.abi3.so" \
         "$s"/sgl_kernel/infllm_ops*.so "$s/xgrammar/lib" "$s/xgrammar/include" \
         "$s/sglang/multimodal_gen" "$s/sglang/test" "$s/sglang/srt/grpc/_core".*.so "$s/bin"
fi
if [ ! -x "$W/venv/bin/python" ]; then
  python3 -m venv "$W/venv"
  # the image's packages (KINDS.md) the launch path imports; torch and triton as installed here
  "$W/venv/bin/pip" install -q torch triton numpy psutil pillow requests pyyaml jinja2 \
    "huggingface-hub>=1.5,<2" safetensors sentencepiece tiktoken protobuf einops httpx anyio \
    h11 click regex attrs pygments nvidia-ml-py aiohttp uvloop packaging scipy prometheus-client \
    --extra-index-url https://download.pytorch.org/whl/cpu
fi
export PYTHONPATH=$repo/src
python3 -m kvbench dummy-model "$W/model" --model qwen3.5-397b-a17b-scaled > /dev/null
if [ ! -d "$W/patched/sglang" ]; then  # sglang-34560 applied by kvbench's own patcher
  mkdir -p "$W/patched" && cp -r "$W/site/sglang" "$W/patched/"
  python3 -c "
import sys, yaml; from pathlib import Path; from kvbench.launch.patcher import apply_patch
p = yaml.safe_load(open('$repo/src/kvbench/authoring/data/twin_practice.yaml'))['patches']['sglang-34560']
print('patch', apply_patch(p, Path('$W/patched')))"
fi
K=qwen3.5-bf16-h200-sglang-agentic-mtp
E=(--engine-arg=--attention-backend=triton --engine-arg=--sampling-backend=pytorch
   --engine-arg=--cuda-graph-backend-prefill=disabled --engine-arg=--cuda-graph-max-bs-decode=16
   --engine-arg=--max-total-tokens=43680 --engine-arg=--max-mamba-cache-size=80
   --engine-arg=--max-running-requests=16)
for arm in kvnone kvdram-hicache; do
  extra=(); [ $arm = kvnone ] && extra=(--engine-arg=--page-size=16)
  python3 -m kvbench launch --dry-run --format json --config-files "$here/recipe.yaml" \
    --runner-config "$here/runners.yaml" --config-keys $K --exp-name \
    "qwen3.5_tp1_conc8_${arm}_spec-mtp" --load-format dummy --model-path "$W/model" \
    "${E[@]}" "${extra[@]}" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)[0]['argv'][3:]))" \
    > "$W/argv-$arm.json"
done
# IMAGE_SITE: a directory of the image's packages to use instead of the venv's own
run() { PYTHONPATH=$1:$W/site:$here/../cpu-stubs${IMAGE_SITE:+:$IMAGE_SITE} "$W/venv/bin/python" "$here/cpu_check.py" "${@:2}" 2>&1 \
        | grep -v -i -e warn -e "ignore import error" ; }
echo "== config (0.5.17 as released)"; run "$W/site" config "$W/model"
echo "== config (sglang-34560 applied)"; run "$W/patched" config "$W/model"
echo "== state"; run "$W/site" state "$W/model"
for arm in kvnone kvdram-hicache; do echo "== args $arm"; run "$W/site" args "$W/argv-$arm.json"; done
echo "== tokenizer"; run "$W/site" tokenizer "$W/argv-kvdram-hicache.json" | tail -1
