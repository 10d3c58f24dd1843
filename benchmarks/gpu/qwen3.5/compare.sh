#!/usr/bin/env bash
# Issue 37: kvbench's own verdicts on the valid runs: resident vs HiCache at conc 4 and 8
# (the resident twin ran --page-size 16, another options_id, so each arm is named by its id),
# the unpatched HiCache arm against the patched one at conc 4, and the dashboard.
#   bash benchmarks/gpu/qwen3.5/compare.sh > benchmarks/results/h200/qwen3.5/compare.txt
set -u
cd "$(dirname "$0")/../../results/h200/qwen3.5"
export PYTHONPATH=../../../../src COLUMNS=200
id() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['options_id'])" "$1"; }
RES=$(id runs/resident-c4/result.json) HIC=$(id runs/hicache-c4/result.json)
run() { echo "\$ kvbench compare $*"; python3 -m kvbench compare "$@" 2>&1; echo; }
run runs/hicache-* runs/resident-*
run runs/hicache-* runs/resident-* --a "kv_offloading=none,options_id=$RES" \
  --b "kv_offloading=dram,options_id=$HIC"
run runs/hicache-c4 runs/unpatched-c4 --a config_key=qwen3.5-bf16-h200-sglang-agentic-mtp \
  --b config_key=qwen3.5-bf16-h200-sglang-agentic-mtp-unpatched
python3 -m kvbench report runs --out dashboard.html >/dev/null 2>&1 || echo "report failed" >&2
