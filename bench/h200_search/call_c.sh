#!/usr/bin/env bash
# Call C on the H200: unpack the MLIR library (carry/dslA), then run `tsopt tune gemm` at 8192^3
# there, verifying and building in 15 local processes (--pool processes: no Ray on that machine)
# and measuring inline on the GPU:
#   a long random search, the reference for search efficiency (call D runs TPE).
# Each study has its own database and no warm start, so no study sees another's results.
# Databases and logs come back in $OUT/search-c.tgz.
set -u
W=/tmp/search; mkdir -p $W
[ -e /tmp/dsl/.part_a ] || { tar -xJf carry/dslA/part_a.tar.xz -C /tmp/dsl && touch /tmp/dsl/.part_a && echo "DSL part A unpacked"; }
export PYTHONPATH=/tmp/dsl:/tmp/dsl/nvidia_cutlass_dsl/dsl_packages:$PWD CUTE_DSL_ARCH=sm_90a PYTHONUNBUFFERED=1
python3 -c "import cutlass.cute, optuna, sqlalchemy; print('DSL imports')" 2>&1 | tail -1
tune() {  # tune NAME TIME_LIMIT ARGS...
  local name=$1 limit=$2; shift 2; local start=$SECONDS
  timeout "$limit" python3 -m tsopt tune gemm --m 8192 --n 8192 --k 8192 --dtype bf16 \
    --pool processes --workers ${WORKERS:-15} --no-warm-start --study "gemm-8192-$name" \
    --db "sqlite:///$W/$name.db" --bundle "$W/bundle-$name" "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS-start))s"; tail -n ${TAIL:-8} "$W/$name.log"
}
tune random ${RANDOM_LIMIT:-510} --sampler random --seed 0 --trials 20000 --time ${RANDOM_TIME:-450s}
rm -rf $W/bundle-*
tar czf $OUT/search-c.tgz -C $W . && ls -la $OUT
