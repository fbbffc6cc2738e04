#!/bin/bash
# Every $2 seconds until $1 exits: the GPU's state and where every tsopt Python process is
# (py-spy dump, non-intrusive). Used to find why a study's measuring stalled (bench/tune_gpu).
pid=$1; every=${2:-15}; spy=${SPY:-py-spy}
while kill -0 "$pid" 2>/dev/null; do
  sleep "$every"
  echo "=== $(date +%T)"
  nvidia-smi --query-gpu=utilization.gpu,memory.used,clocks.sm,power.draw --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  for p in $(pgrep -f "tsopt tune|measuring_worker|workers.runner|tsopt.workers" ); do
    echo "--- pid $p: $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-120)"
    $spy dump --pid "$p" 2>&1 | grep -v "^\s*$" | head -25
  done
done
