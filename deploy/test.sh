#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs the whole test suite.
# Usage: deploy/test.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
bash deploy/install-deps.sh
# -g1: line tables and function names, enough for a failing test's backtrace; full debug
# information makes the build a quarter slower.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 600
