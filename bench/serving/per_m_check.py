"""On the GPU: the measuring side's per-M path (workers/range_measure.py) on real kernels.

Torch and this tree only (no DSL)::

    PYTHONPATH=. python3 bench/serving/per_m_check.py A_DIR,B_DIR,... --json OUT.json

For each artifact, in this process: ``measure_artifact(dir)`` as any candidate is measured, and
``measure_artifact(dir, m_samples=[M])``, the path a runtime-M kernel takes at each of its Ms
(the buffers' first M rows as views, the rows past M held to their poison, the launch through
the loader, the per-M figures combined), here at a fixed-M kernel's one M, since runtime-M
kernels are not built yet. Both must be ``ok``; the second's ``per_m`` holds one entry whose
ratio is its ``ratio`` (the range figure of one M is its ratio), and the two ratios should agree
within their intervals (both paired against cuBLAS, in graph mode).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tsopt.workers.candidate import measure_artifact


def main() -> int:
    artifacts = [Path(p) for p in sys.argv[1].split(",")]
    out = Path(sys.argv[sys.argv.index("--json") + 1]) if "--json" in sys.argv else None
    rows, failed = [], []
    for artifact in artifacts:
        m = json.loads((artifact / "artifact.json").read_text())["problem"]["m"]
        plain = measure_artifact(artifact)
        per_m = measure_artifact(artifact, m_samples=[m])
        ok = (plain.status == per_m.status == "ok" and len(per_m.per_m) == 1
              and per_m.per_m[0]["m"] == m and per_m.per_m[0]["ratio"] == per_m.ratio)
        agree = ok and not (per_m.ratio_lo > plain.ratio_hi or plain.ratio_lo > per_m.ratio_hi)
        line = (f"{'ok  ' if ok else 'FAIL'} {artifact.name[:12]} M={m}: plain "
                f"{plain.status} {plain.ratio}, per-M path {per_m.status} {per_m.ratio} "
                f"[{per_m.ratio_lo}, {per_m.ratio_hi}] ({'intervals overlap' if agree else 'apart'})"
                f"{'' if ok else ': ' + str(plain.error or per_m.error)}")
        print(line, flush=True)
        rows.append({"artifact": artifact.name, "m": m, "plain": plain.to_dict(),
                     "per_m_path": per_m.to_dict(), "ok": ok, "intervals_overlap": agree})
        if not ok:
            failed.append(artifact.name)
    print(f"failed: {', '.join(failed) or 'none'}", flush=True)
    if out is not None:
        out.write_text(json.dumps({"rows": rows, "failed": failed}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
