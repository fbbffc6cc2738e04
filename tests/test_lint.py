"""The repository passes ``ruff check`` with pyproject.toml's rules (ruff is a dev extra, so CI
has it): lint errors used to pile up unseen in bench/ scripts, as nothing ran the linter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_repository_passes_ruff() -> None:
    done = ruff(".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_reports_a_late_bound_loop_variable_with_the_projects_rules(tmp_path: Path) -> None:
    # The rules are the project's (B023 is in "B"): a clean run above means they were applied.
    bad = tmp_path / "late.py"
    bad.write_text("fs = []\nfor i in range(3):\n    fs.append(lambda: i)\n")
    done = ruff("--config", str(ROOT / "pyproject.toml"), str(bad), cwd=tmp_path)
    assert done.returncode == 1
    assert "B023" in done.stdout and "late.py:3" in done.stdout
