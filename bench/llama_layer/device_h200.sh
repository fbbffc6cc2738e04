#!/usr/bin/env bash
# Issue #30 on the H200 with the DSL there (bench/device_dsl): the search run against the GPU
# that will serve, as a user with a GPU runs it. One stage a call, the calls chained within 30 s
# (the study database stays in /tmp/llama between them; each stage copies it to $OUT too).
#
#   here, first:   bash bench/llama_layer/device_h200.sh stage      (no GPU, no torch)
#                  writes carry/llama_h200/: the study database and the bundles no run has
#                  measured on this card's kind yet (~16 MB; carry it with the last DSL piece)
#   on the GPU, with PYTHONPATH and CUTE_DSL_ARCH set as bench/device_dsl/README.md says:
#     bash bench/llama_layer/device_h200.sh measure [DEADLINE_S]   the staged bundles measured
#                  (measure_bundles.py), each ingested into the database (tsopt ingest)
#     bash bench/llama_layer/device_h200.sh tune [TIME]            tsopt tune gemm --workload,
#                  inline on this GPU, 15 build processes, TIME shared out (default 8m); stopped
#                  with Ctrl-C at 560 s if still running (a trial boundary: nothing is lost)
#     bash bench/llama_layer/device_h200.sh ship                   tsopt export --workload
#                  --measured-on <this GPU>, then layer.py (2 passes) and check_dispatch.py
set -uo pipefail
STAGE=${1:?stage: stage, measure, tune or ship}
ROOT=$(pwd)
WORKLOAD=$ROOT/examples/llama3_8b_layer.toml
STATE=${LLAMA_STATE:-.tsopt/llama}
STAGED=carry/llama_h200
DB=/tmp/llama/llama.db
export PYTHONPATH="$ROOT:${PYTHONPATH:-}"  # tsopt from this checkout, run in /tmp/llama
tsopt() { (cd /tmp/llama && python3 -m tsopt "$@"); }

case "$STAGE" in
stage)
  rm -rf "$STAGED" && mkdir -p "$STAGED/bundles"
  cp "$STATE/llama.db" "$STAGED/"
  for b in "$STATE"/.tsopt/bundles/*/; do
    [ -e "$b/results.json" ] || cp -r "$b" "$STAGED/bundles/"
  done
  echo "staged: $(ls "$STAGED/bundles" | wc -l) bundles unmeasured here, $(du -sh "$STAGED" | cut -f1)"
  ;;
measure)
  : "${OUT:?set OUT}"
  rm -rf /tmp/llama && mkdir -p /tmp/llama && cp -r "$STAGED"/. /tmp/llama/
  nvidia-smi --query-gpu=name,serial --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 bench/regret/measure_bundles.py /tmp/llama/bundles --deadline "${2:-400}" --reserve 25 \
      --out "$OUT/gen-h200.json" 2>&1 | tail -1
  for b in /tmp/llama/bundles/*/; do
    [ -e "$b/results.json" ] && tsopt ingest "$b" --db sqlite:///llama.db 2>&1 | tail -1
  done
  cp "$DB" "$OUT/llama-measured.db"
  ;;
tune)
  : "${OUT:?set OUT}"
  (cd /tmp/llama && timeout -s INT 560 python3 -m tsopt tune gemm --workload "$WORKLOAD" \
      --time "${2:-8m}" --pool processes --workers 15 --db sqlite:///llama.db) \
      > "$OUT/tune.log" 2>&1
  echo "tune rc=$? at ${SECONDS} s"
  grep -E "^ *[0-9]+ │|sampler:|stopped|interrupted" "$OUT/tune.log" | tail -40
  cp "$DB" "$OUT/llama-tuned.db"
  ;;
ship)
  : "${OUT:?set OUT}"
  GPU=$(python3 -c "import torch; print(torch.cuda.get_device_name(0))")
  rm -rf /tmp/llama-pkg
  tsopt export --workload "$WORKLOAD" --measured-on "$GPU" --out /tmp/llama-pkg \
      --db sqlite:///llama.db > "$OUT/export.log" 2>&1
  echo "export rc=$? at ${SECONDS} s"; tail -3 "$OUT/export.log"
  source bench/llama_layer/layer_dispatch.sh
  layer_and_dispatch /tmp/llama-pkg 150
  ;;
*)
  echo "unknown stage $STAGE (stage, measure, tune or ship)" >&2
  exit 2
  ;;
esac
