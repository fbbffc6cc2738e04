#!/usr/bin/env bash
# Install tsopt and everything its tests use, on a fresh machine (Debian, Python 3.11):
# a virtual environment in .venv with tsopt editable and its dev extras, then the system
# packages the tests drive for real (headless Chromium for the report, PostgreSQL server).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned in pyproject (==2.13.0): the CPU build on this machine's disk, not GBs of CUDA.
.venv/bin/python -m pip install -q -e '.[dev]'

if [ "${TSOPT_SKIP_SYSTEM_PACKAGES:-0}" != "1" ]; then
  bash .ci/chromium.sh
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  fi
fi
echo "installed: $(.venv/bin/tsopt --help >/dev/null && echo tsopt) into .venv"
