#!/usr/bin/env bash
# On the GPU machine (torch only), from the repository root, in ONE call: a workload's bundles
# measured by the runner (resuming what is measured), each bucket's best kernel packed
# (best_artifacts.py), the layer timed against cuBLAS at every M (layer.py), and the dispatch
# and host-cost checks (check_dispatch.py) on the same package. One call saves the machine
# start a second would cost (1-3 min; on 2026-12-05 eight calls were refused first).
#
#   bash bench/llama_layer/device.sh .tsopt/llama/.tsopt/bundles [DEADLINE_S] [MEASURE_ARG...]
#
# DEADLINE_S (default 330): when the measuring stops starting bundles; what it leaves is listed
# in gen.json, and the same command on a warm machine measures it (the runner resumes). The
# layer gets 140 s, the dispatch check what is left of 570 s. OUT: where the results go.
# MEASURE_ARG...: passed to measure_bundles.py, e.g. --first "*-65-128x*" to measure the buckets
# that missed before the others. MEASURED_ON (optional, a GPU name as nvidia-smi prints it): the
# picks are made on that card's measurements alone (best_artifacts.py --measured-on); without
# it a bundle's best on whichever card measured it is packed, and picks from several cards are
# named in one line.
set -uo pipefail
BUNDLES=${1:?bundles directory}
DEADLINE=${2:-330}
shift $(( $# > 1 ? 2 : 1 ))
OUT=${OUT:?set OUT}
nvidia-smi --query-gpu=name,serial --format=csv,noheader | tee "$OUT/gpu.txt"
python3 bench/regret/measure_bundles.py "$BUNDLES" --deadline "$DEADLINE" --reserve 25 \
    --out "$OUT/gen.json" "$@" 2>&1 | tail -1
rm -rf /tmp/llama-pkg
python3 bench/llama_layer/best_artifacts.py "$BUNDLES" --package /tmp/llama-pkg --json "$OUT/picks.json" \
    ${MEASURED_ON:+--measured-on "$MEASURED_ON"}
echo "packed at ${SECONDS} s"
source bench/llama_layer/layer_dispatch.sh
layer_and_dispatch /tmp/llama-pkg 140
