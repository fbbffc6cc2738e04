#!/bin/bash
# The one device call of bench/launch_modes (run from the repository root on the H200):
# tsopt's runner in graph mode, then the independent graph script, twice over, interleaved
# (so that the pass-to-pass spread includes the drift between them); everything packed into
# $OUT/launch_modes.tar.gz, with the summary beside it.
set -u
BUNDLES=${1:-carry/launch_modes}
OUT=${OUT:-/tmp/launch_modes_out}
mkdir -p "$OUT"
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$W/gpu.csv" 2>&1
for pass in 1 2; do
  timeout 150 python3 bench/launch_modes/runner_pass.py --bundles "$BUNDLES" \
    --out "$W/runner.pass$pass.json" > "$W/runner.pass$pass.log" 2>&1
  echo "runner pass $pass: rc $?" | tee -a "$W/calls.log"
  timeout 70 python3 bench/launch_modes/graph_check.py --bundles "$BUNDLES" \
    --out "$W/script.pass$pass.json" > "$W/script.pass$pass.log" 2>&1
  echo "script pass $pass: rc $?" | tee -a "$W/calls.log"
  tar czf "$OUT/launch_modes.tar.gz" -C "$W" .  # after each pass: a call cut short keeps pass 1
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$W/gpu.csv" 2>&1
cp "$BUNDLES/winners.json" "$W/" 2>/dev/null
python3 bench/launch_modes/summarise.py "$W" > "$OUT/summary.md" 2>&1
tar czf "$OUT/launch_modes.tar.gz" -C "$W" .
cat "$OUT/summary.md"
