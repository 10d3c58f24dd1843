#!/usr/bin/env bash
# The simulator's predictions for the issue-37 runs, made before they run: the scaled Qwen3.5
# (kvbench/qwen3.5-397b-a17b-scaled) with MTP (acceptance 3.39 of 4 verified tokens, SGLang's
# simulated acceptance), the GPU pools run.sh caps (43,648 KV tokens after page alignment, 16
# running requests) and the host KV pool the planner sizes for those caps (688,000 tokens of
# the proportional 32 GB split, tests/plan/test_engine_caps.py), write_through_selective, the
# runs' workload (the bounded Claude Code sessions of benchmarks/gpu/vllm/traces, 50 s, outputs
# <= 256), on the SGLang 0.5.17 H200 triton profile fitted in issue 25
# (benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml, a Qwen3-8B fit).
# `kvbench simulate-jobs` plans each row without run.sh's engine caps (an uncapped pool of
# ~18M tokens, nothing spills), so the capped tiers are given to `kvbench simulate` here.
#   bash benchmarks/gpu/qwen3.5/predict.sh > benchmarks/gpu/qwen3.5/predictions.txt
# Session 12's repeats were predicted, before they ran, on the Qwen3.5 profile fitted on
# session 9's runs (fit_profile.py) with the runs' --scheduler-recv-interval 10 and chunked
# prefill 8192 (what sim_error.py simulates):
#   ENGINE_PROFILE=benchmarks/results/h200/qwen3.5/engine-sglang-h200-qwen3.5.yaml \
#   EXTRA="--scheduler-recv-interval 10 --chunked-prefill-tokens 8192" \
#     bash benchmarks/gpu/qwen3.5/predict.sh > benchmarks/gpu/qwen3.5/predictions-s12.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
P=${ENGINE_PROFILE:-benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml}
read -r -a extra <<< "${EXTRA:-}"
echo "# kvbench $(git rev-parse --short HEAD) $(date -u +%FT%TZ): ENGINE_PROFILE=$P EXTRA=${EXTRA:-} bash benchmarks/gpu/qwen3.5/predict.sh"
for c in 4 8; do
  echo "== --concurrency $c --duration 50 --write-policy write_through_selective"
  python3 -m kvbench simulate --trace benchmarks/gpu/vllm/traces \
    --model kvbench/qwen3.5-397b-a17b-scaled --hardware h200-measured --engine-profile $P \
    --gpu-tokens 43648 --host-tokens 688000 --max-running-requests 16 \
    --spec-accept-length 3.39 --spec-verify-tokens 4 --max-tokens-cap 256 --compare \
    --concurrency $c --duration 50 --write-policy write_through_selective "${extra[@]}" 2>&1
done
