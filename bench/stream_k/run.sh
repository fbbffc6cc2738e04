#!/usr/bin/env bash
# On the H200 (torch only): cuBLAS's kernel names, then every stream-K bundle measured paired
# against cuBLAS, then the stream-K property pairs checked; everything packed into one archive
# under $OUT (a call brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/stream-k-out}"
mkdir -p "$out/r"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > "$out/r/gpu.csv" 2>&1
python3 bench/stream_k/cublas_kernels.py --out "$out/r/cublas-kernels.json" 2>&1 | tee "$out/r/cublas.log"
for bundle in carry/stream-k/sk-*; do
  name=$(basename "$bundle")
  python3 -m tsopt measure "$bundle" > "$out/r/$name.log" 2>&1
  tail -3 "$out/r/$name.log"
  cp "$bundle/results.json" "$out/r/$name.results.json" 2>/dev/null
  cp "$bundle/labels.tsv" "$out/r/$name.labels.tsv" 2>/dev/null
  cp "$bundle/manifest.json" "$out/r/$name.manifest.json" 2>/dev/null
done
if [ -f carry/sk-property/index.json ]; then
  python3 bench/gemm_property/gemm_property.py run --index carry/sk-property/index.json \
    --out "$out/r/sk-property.json" > "$out/r/sk-property.log" 2>&1
  tail -5 "$out/r/sk-property.log"
fi
tar -czf "$out/stream-k-results.tar.gz" -C "$out" r && rm -rf "$out/r"
