#!/usr/bin/env bash
# Call E on the H200 (after call B has unpacked DSL part B again, within 30 s): two more TPE
# seeds as in call D, then the GEMM export checked on the GPU: `tsopt export` of the best of
# TPE seed 3, its kernel.py compiling and checking itself against torch, its cubin recompiled
# and compared, and a fresh torch-only process timing it through the export's own loader.
set -u
W=/tmp/search; mkdir -p $W
[ -e /tmp/dsl/.part_a ] || { tar -xJf carry/dslA/part_a.tar.xz -C /tmp/dsl && touch /tmp/dsl/.part_a && echo "DSL part A unpacked"; }
export PYTHONPATH=/tmp/dsl:/tmp/dsl/nvidia_cutlass_dsl/dsl_packages:$PWD CUTE_DSL_ARCH=sm_90a PYTHONUNBUFFERED=1
tune() {
  local name=$1 limit=$2; shift 2; local start=$SECONDS
  timeout "$limit" python3 -m tsopt tune gemm --m 8192 --n 8192 --k 8192 --dtype bf16 \
    --pool processes --workers ${WORKERS:-15} --no-warm-start --study "gemm-8192-$name" \
    --db "sqlite:///$W/$name.db" --bundle "$W/bundle-$name" "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS-start))s"; tail -n ${TAIL:-8} "$W/$name.log"
}
step() { local name=$1; shift; local start=$SECONDS; timeout 120 "$@" > "$W/$name.log" 2>&1; echo "$name rc=$? $((SECONDS-start))s"; tail -n 6 "$W/$name.log"; }
for seed in 3 4; do
  tune tpe-s$seed ${TPE_LIMIT:-175} --sampler tpe --seed $seed --trials 5000 --time ${TPE_TIME:-150s}
done
step export python3 -m tsopt export gemm-8192-tpe-s3 --out $W/export-gemm --db sqlite:///$W/tpe-s3.db
step export_kernelpy python3 $W/export-gemm/kernel.py
step export_cubin sh -c "python3 $W/export-gemm/kernel.py --cubin $W/recompiled.cubin && cmp $W/recompiled.cubin $W/export-gemm/kernel.cubin && echo identical cubins"
step export_check env -u PYTHONPATH python3 bench/export_check.py $W/export-gemm --json $W/export_check.json
rm -rf $W/bundle-*
tar czf $OUT/search-e.tgz -C $W . && ls -la $OUT
