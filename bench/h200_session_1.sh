#!/usr/bin/env bash
# First of two back-to-back calls on the H200 (the second must start within 30 s, while files
# left under /tmp survive). The CUTLASS DSL for Python 3.12 is too big for one transfer
# (carry/dslA: the MLIR library, ~50 MiB xz; carry/dslB: everything else, ~25 MiB xz), so this
# call unpacks part B into /tmp/dsl and measures the copy bundles (torch only).
# Usage there: bash bench/h200_session_1.sh BUNDLE [BUNDLE ...]
set -u
mkdir -p /tmp/dsl && tar -xJf carry/dslB/part_b.tar.xz -C /tmp/dsl && echo "DSL part B unpacked"
for bundle in "$@"; do
  name=$(basename "$bundle")
  timeout 240 python3 -m tsopt measure "$bundle" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?"
  cp "$bundle/results.json" "$OUT/$name.results.json" 2>/dev/null
  tail -n 8 "$OUT/$name.log"
done
