# Sourced by device.sh and device_h200.sh (on the GPU machine, from the repository root): the
# layer timed against cuBLAS (layer.py, 2 passes) and the dispatch and host-cost checks
# (check_dispatch.py) on one package, the checks given what is left of 570 s of the caller's
# SECONDS; the lines worth reading printed at the end.
#
#   layer_and_dispatch PACKAGE LAYER_TIMEOUT_S      (OUT: where the results go)
layer_and_dispatch() {
  local package=$1 layer_timeout=$2 left
  timeout "$layer_timeout" python3 -u bench/llama_layer/layer.py --package "$package" \
      --json "$OUT/layer.json" --passes 2 > "$OUT/layer.log" 2>&1
  echo "layer rc=$? at ${SECONDS} s"
  left=$((570 - SECONDS))
  if [ "$left" -gt 30 ]; then
    timeout "$left" python3 -u bench/serving/check_dispatch.py --package "$package" \
        --json "$OUT/dispatch.json" > "$OUT/dispatch.log" 2>&1
    echo "dispatch rc=$? at ${SECONDS} s"
  fi
  grep -E "^bucket|^MLP" "$OUT/layer.log"
  tail -3 "$OUT/dispatch.log" 2>/dev/null
}
