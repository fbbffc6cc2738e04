#!/usr/bin/env bash
# On the H200 (torch only): measure every bundle of carry/targets (build_bundles.py), paired
# with the vendor baseline, in two passes while time allows (a second pass starts only before
# PASS2_BEFORE seconds), and pack the results and logs into one archive under $1.
#     bash bench/targets_h200/measure.sh $OUT
set -u
out=${1:?usage: measure.sh OUT}
pass2_before=${PASS2_BEFORE:-300}
work=$(mktemp -d)
start=$SECONDS
for pass in 1 2; do
  if [ "$pass" = 2 ] && [ $((SECONDS - start)) -ge "$pass2_before" ]; then
    echo "no second pass: $((SECONDS - start)) s gone"; break
  fi
  for bundle in carry/targets/targets-*; do
    name=$(basename "$bundle")
    rm -f "$bundle/results.json"
    timeout 240 python3 -m tsopt measure "$bundle" > "$work/$name.pass$pass.log" 2>&1
    echo "pass $pass $name rc $? at $((SECONDS - start)) s"
    [ -f "$bundle/results.json" ] && cp "$bundle/results.json" "$work/$name.pass$pass.results.json"
  done
done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$work/gpu.csv" 2>&1
tar -cJf "$out/targets-results.tar.xz" -C "$work" .
