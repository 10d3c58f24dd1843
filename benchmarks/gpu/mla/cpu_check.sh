#!/usr/bin/env bash
# Issue 37 item 6 on a machine without a GPU: SGLang 0.5.17's own code on the scaled DeepSeek-V3
# (README.md "CPU checks"). Reuses the clean cp311 venv of ../qwen3.5/cpu_check.sh (the bundle's
# wheels with the bundle's cuts, the image's packages; built there if missing) and its
# cpu_check.py: ModelConfig of target and NextN draft (`mla`), then SGLang's parser and
# ServerArgs resolution (`args`, device probes answering as an H200) on the argv kvbench renders
# for each run.sh arm, with run.sh's flags and caps.
#   bash benchmarks/gpu/mla/cpu_check.sh [WORK_DIR]      (default /tmp/q35check)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
W=${1:-/tmp/q35check}
[ -x "$W/venv/bin/python" ] && [ -d "$W/site/sglang" ] || bash "$here/../qwen3.5/cpu_check.sh" "$W" > /dev/null
# The venv's torch and numpy may be gone (a shared /tmp was cleaned): then links to this
# machine's torch (cpu), numpy, triton and the packages they need stand in for the image's, in
# a folder of their own after the bundle's site (so SGLang 0.5.17 and its transformers win)
image_links() {
  local g v m
  g=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  v=$("$W/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mkdir -p "$1"
  for m in torch torchgen functorch numpy numpy.libs triton sympy mpmath networkx scipy \
           scipy.libs psutil PIL pillow.libs safetensors aiohttp multidict yarl propcache \
           frozenlist aiosignal aiohappyeyeballs attr attrs prometheus_client uvloop jinja2 \
           markupsafe; do
    [ -e "$v/$m" ] || { [ -e "$g/$m" ] && ln -sfn "$g/$m" "$1/$m"; }
  done
  # and their dist-info (transformers checks numpy's version by its metadata)
  python3 - "$g" "$1" <<'PY'
import sys
from pathlib import Path
g, d = Path(sys.argv[1]), Path(sys.argv[2])
names = {p.name.lower().replace("_", "-") for p in d.iterdir()} | {"pillow"}
for info in g.glob("*.dist-info"):
    dist = info.name.split("-")[0].lower().replace("_", "-")
    if dist in names and not (d / info.name).exists():
        (d / info.name).symlink_to(info)
PY
}
if ! "$W/venv/bin/python" -c "import torch, numpy" 2> /dev/null; then
  IMAGE_SITE=${IMAGE_SITE:-/tmp/mla-check-image}
  [ -d "$IMAGE_SITE" ] || image_links "$IMAGE_SITE"
  echo "image packages: $IMAGE_SITE (links; the venv has no torch/numpy)"
fi
export PYTHONPATH=$repo/src
M=$W/model-dsv3
python3 -m kvbench dummy-model "$M" --model deepseek-v3-scaled > /dev/null
# run.sh's COMMON and CAPS
E=(--engine-arg=--attention-backend=triton --engine-arg=--sampling-backend=pytorch
   --engine-arg=--disable-cuda-graph --engine-arg=--max-total-tokens=43680
   --engine-arg=--max-running-requests=16)
for key in dsv3-bf16-h200-sglang-agentic-mtp dsv3-bf16-h200-sglang-agentic; do
  spec=_spec-mtp; [ $key = dsv3-bf16-h200-sglang-agentic ] && spec=
  for arm in kvnone kvdram-hicache; do
    python3 -m kvbench launch --dry-run --format json --config-files "$here/recipe.yaml" \
      --runner-config "$here/runners.yaml" --config-keys $key --exp-name \
      "dsv3_tp1_conc8_${arm}${spec}" --load-format dummy --model-path "$M" "${E[@]}" \
      | python3 -c "import json,sys; j=json.load(sys.stdin)[0]; print(json.dumps(j['argv'][3:]))
print(' '.join(j['argv']), file=sys.stderr); [print('warning:', w, file=sys.stderr) for w in j['warnings']]" \
      > "$W/argv-dsv3-$arm$spec.json" 2> "$W/argv-dsv3-$arm$spec.txt"
  done
done
run() { PYTHONPATH=$W/site:$W/stub${IMAGE_SITE:+:$IMAGE_SITE} "$W/venv/bin/python" "$here/../qwen3.5/cpu_check.py" "$@" 2>&1 \
        | grep -v -i -e warn -e "ignore import error" ; }
echo "== mla config (target, NextN draft)"; run mla "$M"
echo "== kvbench's profile"
python3 -c "
from kvbench.models.loader import load_model
m = load_model('kvbench/deepseek-v3-scaled')
print('mla', m.mla, 'layers', m.num_layers, 'mtp', m.mtp_layers, 'params %.2f B' % (m.total_params / 1e9))
for p in m.kv_pools(1): print(' ', p.name, p.bytes_per_token_per_rank, 'B/token:', p.note)"
for f in "$W"/argv-dsv3-*.json; do
  n=$(basename "$f" .json); echo "== args ${n#argv-dsv3-}"; sed 's/^/  kvbench: /' "${f%.json}.txt"
  run args "$f"
done
