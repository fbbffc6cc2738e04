#!/usr/bin/env bash
# One device call (torch only, no DSL there) for the N-split (issue #28 item 8) and item 3:
#   1. the split_n property test: the pairs gemm_property.py built here, checked on the GPU;
#   2. mid and fp16-wide: split_n variants beside the oracle picks, two passes (fwd, rev) of
#      the runner in graph mode (split_n_pairs.py built them);
#   3. item 3 at decode-heavy-k: which kernels the runner's and the graph script's captures of
#      torch.matmul run (bench/launch_modes/kernels_seen.py).
# Each step's files go to $OUT as it ends (a call cut short keeps what it finished).
#   bash bench/where_space_loses/device.sh    (carry carry/gemm-property-split-n,
#                                               carry/split_n_pairs, carry/launch_heldout)
set -u
W=$(mktemp -d)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,serial,clocks.sm,power.draw,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python3 bench/gemm_property/gemm_property.py run \
  --index carry/gemm-property-split-n/index.json --out "$OUT/split-n-property.json" > "$OUT/property.log" 2>&1
echo "property rc $?"; tail -3 "$OUT/property.log"
cp carry/split_n_pairs/*.roles.json "$W/" 2>/dev/null
for b in mid-fwd fp16-wide-fwd mid-rev fp16-wide-rev; do
  timeout 70 python3 -m tsopt.workers.runner --bundle "carry/split_n_pairs/$b" > "$W/$b.log" 2>&1
  echo "$b rc $?"; tail -1 "$W/$b.log"
  cp "carry/split_n_pairs/$b/results.json" "$W/$b.results.json" 2>/dev/null
  cp "carry/split_n_pairs/$b/manifest.json" "$W/$b.manifest.json"
  tar czf "$OUT/pairs.tar.gz" -C "$W" .
done
S=$(mktemp -d)
mkdir -p /tmp/dhk && cp -r carry/launch_heldout/launch-gemm-bf16-4x2048x16384 carry/launch_heldout/winners.json /tmp/dhk/
for v in runner script-regions; do
  if [ "$v" = runner ]; then A="bench/launch_modes/runner_pass.py --bundles /tmp/dhk --out $S/$v.json"
  else A="bench/launch_modes/graph_check.py --bundles /tmp/dhk --regions --out $S/$v.json"; fi
  echo "== kernels seen: $v"
  timeout 60 python3 bench/launch_modes/kernels_seen.py --out "$S/seen-$v.json" -- $A 2>&1 | grep -v '^{' | tail -6
  tar czf "$OUT/seen.tar.gz" -C "$S" .
done
ls -la "$OUT"
