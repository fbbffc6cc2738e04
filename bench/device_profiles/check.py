"""On the GPU machine (torch only): load each artifact of build.py through the exported
loader (workers/loader.py) and through the measuring side's open_library, with the GPU's
real SM count. Expected on an H200 (132 SMs): the H200_SXM kernel loads and computes D = A·Bᵀ
within bf16 tolerance; the H100_PCIE one (114 SMs) is refused at load by both, in one line
naming both SM counts. Writes $OUT/check.json.

    python bench/device_profiles/check.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tsopt.core.artifact import ArtifactManifest  # noqa: E402
from tsopt.workers import device as measuring_device  # noqa: E402
from tsopt.workers.loader import KernelLoadError, load_kernel  # noqa: E402

HERE = Path(__file__).resolve().parent


def check(directory: Path) -> dict[str, object]:
    row: dict[str, object] = {"profile": directory.name}
    props = torch.cuda.get_device_properties(0)
    row["gpu"] = {"name": props.name, "sm_count": props.multi_processor_count}
    try:
        kernel = load_kernel(directory)
        a = torch.randn(128, 8192, device="cuda").to(torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
        d = kernel(a, b)
        torch.cuda.synchronize()
        reference = a.float() @ b.float().T
        row["loader"] = "loaded"
        row["rel_err"] = float((d.float() - reference).norm() / reference.norm())
    except KernelLoadError as exc:
        row["loader"] = f"refused: {exc}"
    try:
        measuring_device.open_library(directory, ArtifactManifest.read(directory))
        row["open_library"] = "loaded"
    except KernelLoadError as exc:
        row["open_library"] = f"refused: {exc}"
    return row


def main() -> int:
    rows = [check(d) for d in sorted((HERE / "artifacts").iterdir()) if d.is_dir()]
    text = json.dumps(rows, indent=2)
    print(text)
    out = Path(os.environ.get("OUT", HERE))
    (out / "check.json").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
