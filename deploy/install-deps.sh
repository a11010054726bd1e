#!/usr/bin/env bash
# Installs every build and test dependency of kvroute from Debian 12 packages.
# Idempotent: packages already present are skipped; safe to run as root on a bare machine.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  libboost1.81-dev libboost-json1.81-dev
  libabsl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcli11-dev libxxhash-dev
  # tests/deploy: a real Prometheus (and promtool) and Node.js for the OpenAI SDK client test.
  prometheus nodejs
  # Debian's npm, unless an npm is already installed (NodeSource's nodejs bundles npm and
  # conflicts with Debian's npm package).
  $(command -v npm >/dev/null 2>&1 || echo npm)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
