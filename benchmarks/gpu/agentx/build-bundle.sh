#!/usr/bin/env bash
# Build the offline agentx-harness 1.0.12 bundle for the H200 image (Python 3.12, no network):
# the wheels of agentx-harness and its dependencies for CPython 3.12 on manylinux x86_64, less
# the packages the image already has (SKIP, pip names), installed into one site directory and
# written as an xz tar stream cut into parts that fit one device call each.
#   bash benchmarks/gpu/agentx/build-bundle.sh OUT_DIR [PART_BYTES]   (default 45 MiB)
#   SKIP="torch numpy ..."  packages not to carry (default: the image's, README.md)
# On the GPU machine: cat ax-part-* | xz -d | tar -xf - -C /tmp/axsite (run.sh does this).
set -euo pipefail
out=${1:?OUT_DIR}; part_bytes=${2:-47185920}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat=()
for p in manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
         manylinux_2_31 manylinux_2_34 manylinux_2_35; do plat+=(--platform "${p}_x86_64"); done
pyflags=(--only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}")
skip=${SKIP:-"torch triton numpy nvidia-ml-py"}
python3 -m pip download -q "${pyflags[@]}" -d "$work/wheels" agentx-harness==1.0.12
for name in $skip; do rm -f "$work"/wheels/"${name//-/_}"-*.whl; done
python3 -m pip install -q --no-deps --no-compile --ignore-requires-python --target "$work/site" "${pyflags[@]}" \
  "$work"/wheels/*.whl
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out"; rm -f "$out"/ax-part-*
tar -cf - -C "$work/site" . | xz -T0 -6 | split -b "$part_bytes" -d - "$out/ax-part-"
{ echo "# agentx-harness 1.0.12 bundle built $(date -u +%FT%TZ); SKIP=$skip"
  echo "# wheels (bytes)"; (cd "$work/wheels" && stat -c '%s %n' ./*.whl | sed 's|\./||')
  echo "# unpacked: $(du -sm "$work/site" | cut -f1) MiB"
  echo "# parts (bytes)"; (cd "$out" && stat -c '%s %n' ax-part-*)
} > "$out/manifest.txt"
ls -l "$out"
