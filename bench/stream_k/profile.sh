#!/usr/bin/env bash
# On the H200: where a stream-K kernel's time goes, beside its data-parallel twin (Nsight
# Compute summaries and the SASS of both, packed into $OUT).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/sk-profile}"; mkdir -p "$out/p"
profile() {  # bundle, then genome prefixes
  local bundle=$1; shift
  ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis --kernel-name regex:"gemm|kernel_cutlass" --launch-count 10 \
      python3 bench/stream_k/profile.py "$bundle" "$@" > "$out/p/$(basename "$bundle").ncu.txt" 2>&1
  grep -E "rel err|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Stall|Warp Cycles Per Issued" "$out/p/$(basename "$bundle").ncu.txt" | head -60
}
profile carry/stream-k/sk-128x8192x8192 570f1255aee5 c1c0c36d61d2
profile carry/stream-k/sk-1024x1024x1024 6d85b86e3aed 863102013e86
for h in 570f1255aee5 c1c0c36d61d2; do
  cuobjdump -sass carry/cubins/$h.cubin > "$out/p/$h.sass" 2>&1
done
tar -czf "$out/profile.tar.gz" -C "$out" p && rm -rf "$out/p"
