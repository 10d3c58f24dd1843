#!/usr/bin/env bash
# Issue 39's acceptance, measured: `pip install -e . && kvbench quickstart` on a fresh clone
# beside a CPU hog pinned to the first core, RUNS times. Prints, per run, the load average
# before it, the wall time, the pace line and how many deltas have a verdict. Usage:
#   benchmarks/quickstart/busy_core.sh [RUNS]      (from a checkout; clones its HEAD)
set -euo pipefail
RUNS=${1:-5}
SRC=$(git rev-parse --show-toplevel)
WORK=$(mktemp -d /tmp/kvbench-qs-XXXX)
git clone -q "$SRC" "$WORK/clone"
python3 -m venv --system-site-packages "$WORK/venv"
(cd "$WORK/clone" && "$WORK/venv/bin/pip" install -q --no-deps --no-build-isolation -e .)
for i in $(seq 1 "$RUNS"); do
  run="$WORK/run$i"; mkdir -p "$run"
  load=$(cut -d' ' -f1 /proc/loadavg)
  taskset -c 0 python3 -c 'while True: pass' & hog=$!
  start=$(date +%s.%N)
  (cd "$run" && "$WORK/venv/bin/kvbench" quickstart > out.txt 2> err.txt) || echo "run $i: exit $?"
  end=$(date +%s.%N)
  kill "$hog"; wait "$hog" 2>/dev/null || true
  verdicts=$(grep -cE '│ (better|worse|within noise) +│$' "$run/out.txt" || true)
  deltas=$(grep -E '^│ (output|interactivity|TTFT|ITL|E2E|cache)' "$run/out.txt" | wc -l)
  valid=$(grep -E '^│ valid ' "$run/out.txt" | grep -oE '[0-9]+/[0-9]+ valid' | tr '\n' ' ')
  printf 'run %d: load %s before, %.1f s wall; %s of %s deltas with a verdict; %s\n  %s\n' \
    "$i" "$load" "$(echo "$end - $start" | bc)" "$verdicts" "$deltas" "$valid" \
    "$(grep '^pace:' "$run/err.txt" | cut -c1-200)"
done
