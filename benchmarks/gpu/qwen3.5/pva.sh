#!/usr/bin/env bash
# Issue 37 item 3: each pool SGLang 0.5.17 allocated beside kvbench's plan of the same job, the
# run's own plan (plan.orig.json, the planner of the day) and today's (plan.json, collect.py),
# with the scheduler's RSS growth over the resident run of the same concurrency.
#   bash benchmarks/gpu/qwen3.5/pva.sh > benchmarks/results/h200/qwen3.5/plan-vs-allocated.txt
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=src
R=benchmarks/results/h200/qwen3.5
P=benchmarks/gpu/qwen3.5/plan_vs_allocated.py
for pf in plan.orig.json plan.json; do
  echo "### $pf: $([ $pf = plan.json ] && echo "today's planner" || echo "the planner the runs had")"
  python3 $P --plan-file $pf $R/probe/server
  # JOB:RESIDENT: the resident run of the same concurrency (session 12's own for its jobs)
  for job in hicache-c4:resident-c4 unpatched-c4:resident-c4 hicache-c8-a:resident-c8 \
             hicache-c8-b:resident-c8 resident-c4: resident-c8: \
             hicache-c8-s12:resident-c8-s12 resident-c8-s12:; do
    d=$R/runs/${job%%:*}; res=$R/runs/${job##*:}
    if [ "${job%%-*}" = resident ]; then python3 $P --plan-file $pf $d
    else python3 $P --plan-file $pf $d --memory $d/memory.jsonl.gz --resident-memory $res/memory.jsonl.gz
    fi
  done
  echo
done
echo "# rows marked ! differ by more than 2%; scheduler RSS: peak RSS growth over the resident run"
echo "# of the same concurrency against the projected host footprint (kvbench.results.allocation)"
