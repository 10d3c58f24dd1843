#!/usr/bin/env bash
set -euo pipefail
set -x

# AgentX trace replay for Qwen3.5-397B-A17B MXFP4 on MI355X with SGLang
# native EAGLE MTP. Throughput uses the committed golden synthetic
# acceptance length; evaluation retains real target-model verification.

source "$(dirname "$0")/../../benchmark_lib.sh"

export EVAL_FRAMEWORK="lm-eval"

check_env_vars \
    MODEL TP CONC EP_SIZE RESULT_DIR DURATION \
    KV_OFFLOADING TOTAL_CPU_DRAM_GB

SCHEDULER_RECV_INTERVAL=${SCHEDULER_RECV_INTERVAL:-30}

if [[ -n "${SLURM_JOB_ID:-}" ]]; then
    echo "JOB $SLURM_JOB_ID running on ${SLURMD_NODENAME:-unknown}"
fi

if [[ -n "${MODEL_PATH:-}" ]]; then
    if [[ ! -d "$MODEL_PATH" || -z "$(ls -A "$MODEL_PATH" 2>/dev/null)" ]]; then
        hf download "$MODEL" --local-dir "$MODEL_PATH"
    fi
else
    hf download "$MODEL"
    export MODEL_PATH="$MODEL"
fi

rocm-smi || true
amd-smi || true

export WEKA_LOADER_OVERRIDE=semianalysis_cc_traces_weka_062126_256k
resolve_trace_source
install_agentic_deps

export AIPERF_SERVER_METRICS_URLS="http://localhost:${PORT}/metrics"
export AIPERF_REQUIRED_SERVER_METRIC_PREFIX="sglang:"

SERVER_LOG="$RESULT_DIR/server.log"
mkdir -p "$RESULT_DIR"

SERVER_PID=""
cleanup_agentic_services() {
    local exit_code=$?
    trap - EXIT INT TERM
    set +e
    stop_background_process_tree "$SERVER_PID" "SGLang server" 60
    exit "$exit_code"
}
trap cleanup_agentic_services EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The hicache DRAM-offload arm, written by `kvbench recipe mirror`
# after seed 000 (InferenceX 42692ef77) qwen3.5_fp4_mi355x_sglang_mtp.sh:112-134.
# Its page size and flags: kvbench's planner settings for the arm (plan/data/settings.yaml).
CACHE_ARGS=()
PAGE_SIZE=16
if require_agentic_kv_offload_backend hicache; then
    PAGE_SIZE=64

    # sglang-34560 (https://github.com/sgl-project/sglang/pull/34560):
    # this arm's image needs it; resident arms run the image untouched.
    python3 - <<'KVBENCH_PATCH'
import importlib.util
import pathlib
import sys

PATCH = 'sglang-34560'
ANCHOR = ['self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"', 'self.hf_config.num_nextn_predict_layers = 1']
REPLACEMENT = ['self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"', 'self.hf_config.num_nextn_predict_layers = 1', 'self.hf_text_config.num_nextn_predict_layers = 1']
spec = importlib.util.find_spec('sglang')
if spec is None or spec.origin is None:
    sys.exit(f"{PATCH}: package sglang is not importable")
path = pathlib.Path(spec.origin).parent / 'srt/configs/model_config.py'
lines = path.read_text().splitlines(keepends=True)


def at(i, want):
    return [line.strip() for line in lines[i:i + len(want)]] == [w.strip() for w in want]


if any(at(i, REPLACEMENT) for i in range(len(lines))):
    print(f"{PATCH} already applied in {path}")
    sys.exit(0)
found = [i for i in range(len(lines)) if at(i, ANCHOR)]
if len(found) != 1:
    sys.exit(f"{PATCH}: expected its anchor once in {path}, found {len(found)}")
i = found[0]
pad = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
lines[i:i + len(ANCHOR)] = [pad + r + chr(10) for r in REPLACEMENT]
path.write_text("".join(lines))
print(f"{PATCH} applied to {path}")
KVBENCH_PATCH

    # --hicache-size is one per-rank budget SGLang splits over Qwen3.5's hybrid host pools
    # (target KV and Mamba state); packed NEXTN adds its one draft layer on top of the 60
    # target layers (61/60). Keep the node at 80% of the workflow's DRAM budget, with 1 GB
    # per rank for page alignment, so the draft layer and the replay client fit beside it.
    HICACHE_ALIGNMENT_RESERVE_GB=$((TP))
    if [ "$((TOTAL_CPU_DRAM_GB - HICACHE_ALIGNMENT_RESERVE_GB))" -lt 1 ]; then
        echo "Error: no DRAM left for HiCache after the ${HICACHE_ALIGNMENT_RESERVE_GB} GB alignment reserve." >&2
        exit 1
    fi
    MAX_HICACHE_SIZE_GB=$(((TOTAL_CPU_DRAM_GB - HICACHE_ALIGNMENT_RESERVE_GB) * 80 / 100 * 60 / 61 / TP))
    # at most 180 GB per rank:
    # seed 000 (the qwen3.5-fp4-mi355x-sglang-agentic-mtp HiCache arm): --hicache-size at most 180 GB per rank
    HICACHE_MAX_SIZE_GB_PER_RANK=${HICACHE_MAX_SIZE_GB_PER_RANK:-180}
    if [ "$MAX_HICACHE_SIZE_GB" -gt "$HICACHE_MAX_SIZE_GB_PER_RANK" ]; then
        MAX_HICACHE_SIZE_GB="$HICACHE_MAX_SIZE_GB_PER_RANK"
    fi
    HICACHE_SIZE_GB="${HICACHE_SIZE_GB:-$MAX_HICACHE_SIZE_GB}"
    if [ "$HICACHE_SIZE_GB" -lt 1 ] || [ "$HICACHE_SIZE_GB" -gt "$MAX_HICACHE_SIZE_GB" ]; then
        echo "Error: HICACHE_SIZE_GB=$HICACHE_SIZE_GB outside 1..$MAX_HICACHE_SIZE_GB." >&2
        exit 1
    fi
    PROJECTED_HICACHE_TOTAL_GB=$(((HICACHE_SIZE_GB * TP * 61 + 59) / 60 + HICACHE_ALIGNMENT_RESERVE_GB))
    if [ "$PROJECTED_HICACHE_TOTAL_GB" -gt "$TOTAL_CPU_DRAM_GB" ]; then
        echo "Error: projected HiCache use ${PROJECTED_HICACHE_TOTAL_GB} GB exceeds the ${TOTAL_CPU_DRAM_GB} GB budget." >&2
        exit 1
    fi
    echo "HiCache: ${HICACHE_SIZE_GB} GB per rank across TP=${TP}; projected node total ${PROJECTED_HICACHE_TOTAL_GB} GB of ${TOTAL_CPU_DRAM_GB} GB."

    CACHE_ARGS=(
        --enable-hierarchical-cache
        --hicache-size "$HICACHE_SIZE_GB"
        --hicache-io-backend kernel
        --hicache-mem-layout page_first
        --hicache-write-policy write_through_selective
    )
fi

PARALLEL_ARGS=(
    --tp "$TP"
    --dp 1
    --ep-size "$EP_SIZE"
)

TOKENIZER_ARGS=()
if [ "$TP" -ge 4 ]; then
    TOKENIZER_ARGS=(--tokenizer-worker-num 6)
fi

MAX_RUNNING_REQUESTS=$((2 * CONC))
CUDA_GRAPH_MAX_BS="$CONC"
[ "$CUDA_GRAPH_MAX_BS" -gt 64 ] && CUDA_GRAPH_MAX_BS=64

export PYTHONNOUSERSITE=1
export SGLANG_USE_AITER=1
export SGLANG_USE_AITER_UNIFIED_ATTN=1
export AITER_FLYDSL_FORCE=1
export SGLANG_MAMBA_SSM_DTYPE=bfloat16
export SGLANG_TIMEOUT_KEEP_ALIVE=1800

if [ "${EVAL_ONLY:-false}" != "true" ]; then
    export SGLANG_SIMULATE_ACC_LEN=3.39
    export SGLANG_SIMULATE_ACC_METHOD=match-expected
    export SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token
fi

SGLANG_CMD=(
    python3 -m sglang.launch_server
    --model-path "$MODEL_PATH"
    --served-model-name "$MODEL"
    --host 0.0.0.0
    --port "$PORT"
    --trust-remote-code
    "${PARALLEL_ARGS[@]}"
    --attention-backend aiter
    --mem-fraction-static 0.80
    --model-loader-extra-config '{"enable_multithread_load": true}'
    --watchdog-timeout 1200
    --page-size "$PAGE_SIZE"
    --kv-cache-dtype fp8_e4m3
    --cuda-graph-max-bs "$CUDA_GRAPH_MAX_BS"
    --max-running-requests "$MAX_RUNNING_REQUESTS"
    --max-prefill-tokens 32768
    --chunked-prefill-size 32768
    --scheduler-recv-interval "$SCHEDULER_RECV_INTERVAL"
    --stream-interval 50
    "${TOKENIZER_ARGS[@]}"
    --tokenizer-path "$MODEL"
    --reasoning-parser qwen3
    --tool-call-parser qwen3_coder
    --speculative-algorithm EAGLE
    --speculative-num-steps 3
    --speculative-eagle-topk 1
    --speculative-num-draft-tokens 4
    --enable-metrics
    --enable-cache-report
    "${CACHE_ARGS[@]}"
)

printf '%q ' "${SGLANG_CMD[@]}" | tee "$RESULT_DIR/sglang_command.txt"
printf '\n' | tee -a "$RESULT_DIR/sglang_command.txt"
"${SGLANG_CMD[@]}" > "$SERVER_LOG" 2>&1 &
SERVER_PID=$!

wait_for_server_ready --port "$PORT" --server-log "$SERVER_LOG" --server-pid "$SERVER_PID"

if [ "${EVAL_ONLY:-false}" = "true" ]; then
    run_eval --port "$PORT"
else
    build_replay_cmd "$RESULT_DIR"
    REPLAY_CMD+=" --apply-chat-template"
    run_agentic_replay_and_write_outputs "$RESULT_DIR"
fi
