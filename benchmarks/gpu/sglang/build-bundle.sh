#!/usr/bin/env bash
# Build the offline SGLang 0.5.17 bundle for the H200 image (Python 3.12, torch 2.11 + CUDA 13,
# no network): fetch the wheels of wheels.txt, install them into one site directory, remove what
# an sm90 GPU serving a Qwen3 dense model with the triton attention backend never loads, then
# write an xz-compressed tar stream cut into parts that fit one device call each.
#   bash benchmarks/gpu/sglang/build-bundle.sh OUT_DIR [PART_BYTES]   (default 47185920 = 45 MiB)
#   FA3=1 ...  also writes OUT_DIR/fa3-part-NN: sgl_kernel's FlashAttention-3 library alone
#              (1.1 GB unpacked), for --attention-backend fa3; unpack it over the same directory.
#              Without FA3=1, fa3 parts already in OUT_DIR are kept.
# On the GPU machine: cat sg-part-* | xz -d | tar -xf - -C /tmp/sgsite (smoke.sh does this).
set -euo pipefail
out=${1:?OUT_DIR}; part_bytes=${2:-47185920}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat=()
for p in manylinux1 manylinux2010 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 \
         manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  plat+=(--platform "${p}_x86_64"); done
pyflags=(--only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}")
grep -v -e '^#' -e '^$' "$here/wheels.txt" > "$work/reqs.txt"
python3 -m pip download -q --no-deps "${pyflags[@]}" -d "$work/wheels" -r "$work/reqs.txt"
python3 -m pip install -q --no-deps --no-compile --target "$work/site" "${pyflags[@]}" \
  "$work"/wheels/*.whl
s=$work/site
mkdir -p "$out"; rm -f "$out"/part-*
# sgl_kernel/load_utils.py loads sm90/common_ops when the GPU reports compute capability 9.0;
# sm100/ is for every other GPU. flash_ops is FA3 (only --attention-backend fa3 imports it, via
# sgl_kernel/flash_attn.py); flashmla_ops (MLA models) and infllm_ops (InfLLM-V2) are loaded
# under try/except or on first call.
if [ "${FA3:-0}" = 1 ]; then
  rm -f "$out"/fa3-part-*
  tar -cf - -C "$s" sgl_kernel/flash_ops.abi3.so | xz -T0 -6 \
    | split -b "$part_bytes" -d - "$out/fa3-part-"; fi
rm -rf "$s/sgl_kernel/sm100" "$s/sgl_kernel/flash_ops.abi3.so" "$s/sgl_kernel/flashmla_ops.abi3.so" \
       "$s"/sgl_kernel/infllm_ops*.so
# xgrammar's static library and C++ headers are for linking against it, not for Python.
rm -rf "$s/xgrammar/lib" "$s/xgrammar/include"
# sglang: the diffusion runtime (only `sglang serve/generate` of a diffusion model), the test
# helpers, and the native gRPC server (only with --grpc-port) are off the launch_server path.
rm -rf "$s/sglang/multimodal_gen" "$s/sglang/test" "$s/sglang/srt/grpc/_core".*.so
find "$s" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$s/bin"   # console scripts point at the build machine's python
(cd "$s" && du -sm -- * | sort -rn | head -25) > "$work/du.txt"
tar -cf - -C "$s" . | xz -T0 -6 | split -b "$part_bytes" -d - "$out/part-"
{ echo "# SGLang bundle built $(date -u +%FT%TZ) from wheels.txt; PART_BYTES=$part_bytes"
  echo "# wheel sizes (bytes)"; (cd "$work/wheels" && stat -c '%s %n' ./*.whl | sed 's|\./||')
  echo "# unpacked site after slimming: $(du -sm "$s" | cut -f1) MiB; largest entries (MiB)"
  cat "$work/du.txt"
  echo "# parts (bytes)"; (cd "$out" && stat -c '%s %n' part-* fa3-part-* 2>/dev/null) || true
} > "$out/manifest.txt"
ls -l "$out"
