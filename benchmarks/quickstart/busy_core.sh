#!/usr/bin/env bash
# Issue 39's acceptance, measured: `pip install -e . && kvbench quickstart` on a fresh clone
# beside a CPU hog pinned to the first core, RUNS times. Prints, per run, the load average
# before it, the wall time, the pace line and how many deltas have a verdict. With
# BASELINE=<git ref>, a clone of that ref runs beside it, alternately, in the same loop (the
# ratio of the two is the figure; the machine is shared). Usage, from a checkout:
#   [BASELINE=main] benchmarks/quickstart/busy_core.sh [RUNS]
set -euo pipefail
RUNS=${1:-5}
SRC=$(git rev-parse --show-toplevel)
WORK=$(mktemp -d /tmp/kvbench-qs-XXXX)
setup() {  # $1: name, $2: ref
  git clone -q "$SRC" "$WORK/$1" && git -C "$WORK/$1" checkout -q "$2"
  python3 -m venv --system-site-packages "$WORK/$1-venv"
  (cd "$WORK/$1" && "$WORK/$1-venv/bin/pip" install -q --no-deps -e .)
}
setup new HEAD
arms=(new)
if [[ -n "${BASELINE:-}" ]]; then setup base "$BASELINE"; arms=(base new); fi
for i in $(seq 1 "$RUNS"); do
  for arm in "${arms[@]}"; do
    run="$WORK/$arm-run$i"; mkdir -p "$run"
    load=$(cut -d' ' -f1 /proc/loadavg)
    taskset -c 0 python3 -c 'while True: pass' & hog=$!
    start=$(date +%s.%N)
    (cd "$run" && "$WORK/$arm-venv/bin/kvbench" quickstart > out.txt 2> err.txt) \
      || echo "$arm run $i: exit $?"
    end=$(date +%s.%N)
    kill "$hog"; wait "$hog" 2>/dev/null || true
    verdicts=$(grep -cE '│ (better|worse|within noise) +│$' "$run/out.txt" || true)
    deltas=$(grep -E '^│ (output|interactivity|TTFT|ITL|E2E|cache)' "$run/out.txt" | wc -l)
    valid=$(grep -E '^│ valid ' "$run/out.txt" | grep -oE '[0-9]+/[0-9]+ valid' | tr '\n' ' ')
    printf '%s run %d: load %s before, %.1f s wall; %s of %s deltas with a verdict; %s\n  %s\n' \
      "$arm" "$i" "$load" "$(echo "$end - $start" | bc)" "$verdicts" "$deltas" "$valid" \
      "$(grep -E '^(pace|time scale)' "$run/err.txt" | cut -c1-200)"
  done
done
