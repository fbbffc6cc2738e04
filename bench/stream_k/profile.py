"""Launch chosen candidates of the stream-K bundles a few times each, under Nsight Compute on
the H200 (torch and the standard library only), to see where a stream-K kernel's time goes:

    ncu --section SpeedOfLight --section LaunchStats --section WarpStateStats \\
        --kernel-name regex:tsopt --launch-skip 3 --launch-count 1 \\
        python3 bench/stream_k/profile.py carry/stream-k/sk-128x8192x8192 570f1255aee5 c1c0c36d61d2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tsopt.workers.loader import load_kernel  # noqa: E402


def main() -> None:
    bundle, prefixes = Path(sys.argv[1]), sys.argv[2:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    for prefix in prefixes:
        entry = next(c for c in manifest["candidates"] if c["genome_hash"].startswith(prefix))
        kernel = load_kernel(bundle / entry["artifact"])
        a_spec, b_spec = kernel.inputs
        a = torch.randn(a_spec.shape, device="cuda").to(torch.bfloat16)
        b = torch.randn(b_spec.shape, device="cuda").to(torch.bfloat16)
        for _ in range(5):
            d = kernel(a, b)
        torch.cuda.synchronize()
        err = float((d.float() - a.float() @ b.float().T).norm() / (a.float() @ b.float().T).norm())
        print(f"{prefix}: rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
