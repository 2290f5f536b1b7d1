#!/usr/bin/env bash
# Installs Penstock's build and test dependencies on Debian 12 / Ubuntu 24.04 by package name (apt). Idempotent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake git pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
      libopenblas-dev libopenmpi-dev openmpi-bin libpcre2-dev libboost-dev curl python3
      libtomlplusplus-dev gnuplot-nox)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Optional: the `openai` SDK for tests/python/test_openai_client.py (skipped with a message when absent).
if command -v python3 > /dev/null && ! python3 -c "import openai" 2> /dev/null; then
  python3 -m pip install -q --timeout 10 --retries 1 openai 2> /dev/null || echo "setup: could not pip install openai; its tests will be skipped"
fi
