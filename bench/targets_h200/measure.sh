#!/usr/bin/env bash
# On the H200 (torch only): measure every bundle of carry/targets (build_bundles.py), paired
# with the vendor baseline, in two passes while time allows (the second starts only before
# PASS2_BEFORE seconds), into one archive under $1: bench/tune_gpu/remeasure.sh's loop.
#     bash bench/targets_h200/measure.sh $OUT
set -u
out=${1:?usage: measure.sh OUT}
PASSES=2 LATER_PASSES_BEFORE=${PASS2_BEFORE:-300} \
    exec bash "$(dirname "$0")/../tune_gpu/remeasure.sh" "$out/targets-results.tar.xz" carry/targets/targets-*
