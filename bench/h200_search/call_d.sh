#!/usr/bin/env bash
# Call D on the H200 (within 30 s of call C: the DSL and the databases in /tmp survive):
# TPE with seeds 0, 1 and 2, each in its own database, as in call C.
set -u
W=/tmp/search
export PYTHONPATH=/tmp/dsl:/tmp/dsl/nvidia_cutlass_dsl/dsl_packages:$PWD CUTE_DSL_ARCH=sm_90a PYTHONUNBUFFERED=1
tune() {
  local name=$1 limit=$2; shift 2; local start=$SECONDS
  timeout "$limit" python3 -m tsopt tune gemm --m 8192 --n 8192 --k 8192 --dtype bf16 \
    --pool processes --workers ${WORKERS:-15} --no-warm-start --study "gemm-8192-$name" \
    --db "sqlite:///$W/$name.db" --bundle "$W/bundle-$name" "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS-start))s"; tail -n ${TAIL:-8} "$W/$name.log"
}
for seed in 0 1 2; do
  tune tpe-s$seed ${TPE_LIMIT:-160} --sampler tpe --seed $seed --trials 5000 --time ${TPE_TIME:-130s}
done
rm -rf $W/bundle-*
tar czf $OUT/search-d.tgz -C $W . && ls -la $OUT
