#!/usr/bin/env bash
# The simulator's predictions for the SGLang GPU runs, made before they run: the fitted SGLang
# 0.5.17 H200 profile (benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml), the
# runs' workload bounds (run.sh: the bounded Claude Code sessions, outputs <= 256) and the GPU
# KV cap of the servers (43,648 tokens per rank), resident vs HiCache 24 GB (162,816 tokens).
#   bash benchmarks/gpu/sglang/predict.sh one   > benchmarks/results/h200/sglang/predictions.txt
#   bash benchmarks/gpu/sglang/predict.sh two   > benchmarks/results/h200x2/predictions.txt
# `one`: one H200, conc 4 and 6, write_through and write_through_selective, 50 s.
# `two`: two H200s as DP-attention ranks behind the router (issue 29), conc 8 and 12, 120 s.
set -euo pipefail
cd "$(dirname "$0")/../../.."
P=benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml
sim() {
  echo "== $*"
  python3 -m kvbench simulate --trace benchmarks/gpu/vllm/traces --model Qwen/Qwen3-8B \
    --hardware h200-measured --engine-profile $P --gpu-tokens 43648 --host-tokens 162816 \
    --max-tokens-cap 256 --compare "$@" 2>&1
}
case "${1:?one | two}" in
  one) for c in 4 6; do for w in write_through write_through_selective; do
         sim --concurrency $c --duration 50 --write-policy $w; done; done ;;
  two) for c in 8 12; do for r in consistent_hash round_robin; do
         sim --concurrency $c --duration 120 --write-policy write_through_selective --dp 2 \
           --router $r; done; done ;;
  *) echo "one | two" >&2; exit 2 ;;
esac
