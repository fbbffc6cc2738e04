"""What this machine has, asked without torch: an NVIDIA GPU, and its driver's version.

The searching process asks these before it decides to measure (torch is slow to import and
need not be there); a measuring child adds torch's view (tsopt.workers.device).
Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def gpu_present() -> bool:
    """Whether this machine shows an NVIDIA GPU (nvidia-smi, else the device node); no torch.

    A cheap first answer for callers deciding between measuring inline and writing a bundle;
    measuring's baseline probe is the real test (it raises MeasureError naming the reason).
    """
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                     timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        if any(line.startswith("GPU ") for line in listing.splitlines()):
            return True
    return Path("/dev/nvidia0").exists()


def nvidia_smi_driver_version() -> str:
    """The NVIDIA driver version nvidia-smi reports, or "" when it cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ""  # no nvidia-smi here: the caller falls back to the driver's CUDA API version
    return out[0] if out else ""


_IDENTITY_PROBE = (
    "import json, sys, torch\n"
    "count = torch.cuda.device_count()\n"
    "found = []\n"
    "for i in range(count):\n"
    "    p = torch.cuda.get_device_properties(i)\n"
    "    found.append({'index': i, 'name': p.name, 'sm_count': p.multi_processor_count,\n"
    "                  'capability': f'{p.major}.{p.minor}'})\n"
    "print(json.dumps(found))\n"
)


def gpu_identities(timeout_s: float = 180.0) -> tuple[list[dict[str, object]], str]:
    """Every visible GPU as torch sees it (``index``, ``name``, ``sm_count``: a MIG slice's
    own multiprocessors, ``capability``), asked in a child process so that the searching
    process never imports torch; and why the list is empty ("" when it is not)."""
    import json
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _IDENTITY_PROBE], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"the GPU probe did not run ({type(exc).__name__}: {exc})"
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"the GPU probe failed: {tail[:300]}"
    try:
        found = json.loads(lines[-1])
    except ValueError:
        return [], "the GPU probe printed no list"
    return (found, "") if found else ([], "torch sees no CUDA device")
