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
