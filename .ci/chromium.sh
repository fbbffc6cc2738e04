#!/usr/bin/env bash
# Install Debian's headless-capable Chromium and its chromedriver for the report's browser test.
# Idempotent: does nothing when both are already on PATH.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "chromium: $(chromium --version 2>/dev/null || echo present)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
echo "chromium: $(chromium --version 2>/dev/null)"
