#!/bin/bash
# Round 2 of bench/launch_modes (2026-12-04): which difference between the runner's graph mode
# and the independent script moves the ratio? Two passes, interleaved; per pass the runner,
# then the script in four variants: calls per graph (20, the first script's; 32, the runner's
# GRAPH_MIN_LAUNCHES) x replays (each waited for: the GPU idles before every replay; queued:
# back to back, as the runner and a serving loop replay). Everything into one archive.
# VARIANTS (env) chooses others: "<calls> <wait|queued> [batch] [regions]" separated by commas;
# round 3 (2026-12-04) ran VARIANTS="20 wait,32 queued 10" (the first script; the runner's own
# pacing); "regions": the script on the runner's buffer layout (graph_check.py --regions).
set -u
BUNDLES=${1:-carry/launch_modes}
OUT=${OUT:-/tmp/launch_modes_out}
mkdir -p "$OUT"
W=$(mktemp -d)
nvidia-smi --query-gpu=name,serial,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$W/gpu.csv" 2>&1
hostname > "$W/host.txt"
for pass in 1 2; do
  timeout 150 python3 bench/launch_modes/runner_pass.py --bundles "$BUNDLES" \
    --out "$W/runner.pass$pass.json" > "$W/runner.pass$pass.log" 2>&1
  echo "runner pass $pass: rc $?" | tee -a "$W/calls.log"
  IFS=, read -ra variants <<< "${VARIANTS:-20 wait,32 wait,20 queued,32 queued}"
  for variant in "${variants[@]}"; do
    set -- $variant
    flag=""; [ "$2" = queued ] && flag="--queued"
    name="script-c$1-$2"
    if [[ "${3:-}" =~ ^[0-9]+$ ]]; then flag="$flag --batch $3"; name="$name-b$3"; fi
    # "regions" anywhere after the first two: the runner's buffer layout (graph_check --regions)
    if [[ " ${*:3} " == *" regions "* ]]; then flag="$flag --regions"; name="$name-regions"; fi
    name="$name.pass$pass"
    timeout 70 python3 bench/launch_modes/graph_check.py --bundles "$BUNDLES" --calls "$1" $flag \
      --out "$W/$name.json" > "$W/$name.log" 2>&1
    echo "$name: rc $?" | tee -a "$W/calls.log"
  done
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$W/gpu.csv" 2>&1
cp "$BUNDLES/winners.json" "$W/" 2>/dev/null
tar czf "$OUT/launch_modes_factorial.tar.gz" -C "$W" .
python3 bench/launch_modes/factorial_summarise.py "$W" > "$OUT/factorial.md" 2>&1
cat "$OUT/factorial.md"
