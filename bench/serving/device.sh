#!/usr/bin/env bash
# On the GPU machine (torch only), from the repository root: measure the serving bundles, then
# the per-M measuring path and the dispatching op on their kernels. BUNDLES: the bundles'
# directory (carried); OUT: where the results go (results.tar of each bundle's results.json,
# per_m.json, dispatch.json, device.log).
set -uo pipefail
BUNDLES=${1:?bundles directory}
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  for bundle in "$BUNDLES"/*/; do
    echo "== measure $bundle"
    timeout 75 python3 -m tsopt.workers.runner --bundle "$bundle" 2>&1 | tail -4
    cp "$bundle"results.json "$OUT/$(basename "$bundle").results.json" 2>/dev/null
  done
  # The first artifact of each bundle: one fixed-M kernel per bucket stand-in.
  artifacts=$(for bundle in "$BUNDLES"/*/; do ls -d "$bundle"artifacts/* | head -1; done | paste -sd,)
  echo "== per-M path on $artifacts"
  timeout 100 python3 bench/serving/per_m_check.py "$artifacts" --json "$OUT/per_m.json" 2>&1 | tail -12
  echo "== dispatch"
  timeout 170 python3 bench/serving/check_dispatch.py --passes 9 --artifacts "$artifacts" --json "$OUT/dispatch.json" 2>&1 | tail -60
} > "$OUT/device.log" 2>&1
tail -80 "$OUT/device.log"
