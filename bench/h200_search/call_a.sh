#!/usr/bin/env bash
# Call A on the H200 (torch only): check against torch and time the epilogue/arrangement plan
# (bench/gemm_h200.py build epilogue, built on the CPU machine; carry/gemm/epilogue).
set -u
timeout 420 python3 bench/gemm_h200.py run epilogue --out $OUT/gemm-epilogue.json > $OUT/gemm-epilogue.log 2>&1
echo "run rc=$?"
tail -n 90 $OUT/gemm-epilogue.log
