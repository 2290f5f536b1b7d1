#!/usr/bin/env bash
# Installs Penstock's build and test dependencies on Debian 12 / Ubuntu 24.04 by package name (apt). Idempotent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake git pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
      libopenblas-dev libopenmpi-dev openmpi-bin libpcre2-dev libboost-dev curl python3
      libtomlplusplus-dev gnuplot-nox libucx-dev)
PKGS+=(python3-venv python3-pip)  # the tools venv below
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Optional third-party clients for tests/python (each test is skipped with a loud message when its package is absent):
# the `openai` SDK and NVIDIA's `aiperf` benchmark, by package name from PyPI. They go into a virtual environment
# (Debian 12's system python refuses `pip install`, PEP 668); the tests find it at the same path
# (tests/server/serverlib.py: $PENSTOCK_TOOLS_VENV, else ${XDG_CACHE_HOME:-~/.cache}/penstock/tools-venv). Without a
# working venv module: pip --user, then --break-system-packages as the last resort.
PY_TOOLS=(openai aiperf)
VENV="${PENSTOCK_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/penstock/tools-venv}"
pip_opts=(-q --disable-pip-version-check --timeout 30 --retries 2)
if command -v python3 > /dev/null && ! "$VENV/bin/python" -c "import openai, aiperf" 2> /dev/null; then
  if [ ! -x "$VENV/bin/python" ] && ! python3 -m venv "$VENV" > /dev/null 2>&1; then
    rm -rf "$VENV"  # a half-made venv (no ensurepip) would shadow the fallbacks
  fi
  if [ -x "$VENV/bin/python" ]; then
    "$VENV/bin/python" -m pip install "${pip_opts[@]}" "${PY_TOOLS[@]}" ||
      echo "setup: WARNING: could not pip install ${PY_TOOLS[*]} into $VENV; their tests will be skipped"
  elif ! python3 -c "import openai, aiperf" 2> /dev/null; then
    python3 -m pip install "${pip_opts[@]}" --user "${PY_TOOLS[@]}" 2> /dev/null ||
      python3 -m pip install "${pip_opts[@]}" --user --break-system-packages "${PY_TOOLS[@]}" ||
      echo "setup: WARNING: could not pip install ${PY_TOOLS[*]}; their tests will be skipped"
  fi
fi
