#!/usr/bin/env bash
# Second call: unpack the DSL's MLIR library (carry/dslA), then run the parts of the product that
# need the DSL and a GPU together on the H200 itself:
#   1. an exported copy kernel.py checks itself against torch (python kernel.py);
#   2. `tsopt tune copy` measures inline (no bundle step);
#   3. `tsopt tune gemm` end to end at 8192^3 and the other suite shapes;
#   4. `tsopt export` of the best copy of step 2, run as a script (kernel.py checks itself against
#      torch), checked in a fresh process with the export's own loader, and recompiled to compare
#      cubins.
# Everything lands in $OUT/session.tgz (the tool returns at most 8 files).
set -u
W=/tmp/session; mkdir -p $W
# Warm start: the hand sweep of the GEMM template, recorded as finished studies (bench/gemm_warm_db.py).
cp carry/gemm-warm/tsopt.db $W/tsopt.db
tar -xJf carry/dslA/part_a.tar.xz -C /tmp/dsl && echo "DSL part A unpacked"
export PYTHONPATH=/tmp/dsl:$PWD CUTE_DSL_ARCH=sm_90a PYTHONUNBUFFERED=1
python3 -c "import cutlass, cutlass.cute; import optuna, sqlalchemy; print('DSL imports')" 2>&1 | tail -2
step() { local name=$1; shift; local start=$SECONDS; timeout "${STEP_LIMIT:-300}" "$@" > "$W/$name.log" 2>&1; local rc=$?; echo "$name rc=$rc $((SECONDS-start))s"; tail -n "${TAIL:-6}" "$W/$name.log"; }
step kernelpy_copy python3 carry/kernelpy/kernel.py
STEP_LIMIT=150 step inline_copy python3 -m tsopt tune copy --rows 4096 --cols 4096 --dtype fp16 --trials 30 --db sqlite:///$W/tsopt.db --bundle $W/bundle-copy
STEP_LIMIT=${GEMM_LIMIT:-200} step gemm_8192 python3 -m tsopt tune gemm --m 8192 --n 8192 --k 8192 --dtype bf16 --trials ${GEMM_TRIALS:-60} --db sqlite:///$W/tsopt.db --bundle $W/bundle-gemm
for shape in "4096 4096 4096" "128 8192 8192" "8192 1024 8192" "2048 2048 16384"; do
  set -- $shape
  STEP_LIMIT=60 step gemm_${1}x${2}x${3} python3 -m tsopt tune gemm --m $1 --n $2 --k $3 --dtype bf16 --trials ${SUITE_TRIALS:-15} --db sqlite:///$W/tsopt.db --bundle $W/bundle-gemm-$1-$2-$3
done
STEP_LIMIT=120 step export python3 -m tsopt export copy-fp16-4096x4096-sm_90a --out $W/export-copy --db sqlite:///$W/tsopt.db
STEP_LIMIT=120 step export_kernelpy python3 $W/export-copy/kernel.py
STEP_LIMIT=60 step export_check env -u PYTHONPATH python3 bench/export_check.py $W/export-copy --json $W/export_check.json
STEP_LIMIT=120 step export_cubin sh -c "python3 $W/export-copy/kernel.py --cubin $W/recompiled.cubin && cmp $W/recompiled.cubin $W/export-copy/kernel.cubin && echo identical cubins"
rm -rf $W/bundle-* 
tar czf $OUT/session.tgz -C $W . && ls -la $OUT
