#!/usr/bin/env bash
# On a GPU machine (torch only): measure bundles again, PASSES times each in turn, and pack
# their results and logs into one archive (a device call brings back few files). A pass after
# the first starts only before LATER_PASSES_BEFORE seconds (default: no limit).
#     PASSES=2 bash bench/tune_gpu/remeasure.sh OUT_ARCHIVE BUNDLE...
set -u
archive=${1:?usage: remeasure.sh OUT_ARCHIVE BUNDLE...}; shift
work=$(mktemp -d)
start=$SECONDS
for pass in $(seq 1 "${PASSES:-1}"); do
  if [ "$pass" -gt 1 ] && [ -n "${LATER_PASSES_BEFORE:-}" ] \
      && [ $((SECONDS - start)) -ge "$LATER_PASSES_BEFORE" ]; then
    echo "no pass $pass: $((SECONDS - start)) s gone"; break
  fi
  for bundle in "$@"; do
    name=$(basename "$bundle")
    rm -f "$bundle/results.json"
    timeout 240 python3 -m tsopt measure "$bundle" > "$work/$name.pass$pass.log" 2>&1
    echo "pass $pass $name rc $? at $((SECONDS - start)) s"
    [ -f "$bundle/results.json" ] && cp "$bundle/results.json" "$work/$name.pass$pass.results.json"
  done
done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$work/gpu.csv" 2>&1
tar -cJf "$archive" -C "$work" .
