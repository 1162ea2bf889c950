#!/usr/bin/env bash
# Configures and builds Trellis (Release) into build/.
#   scripts/build.sh [TARGET ...]   builds the named targets (default: all)
#   BUILD_DIR   build directory (default: build)
#   JOBS        parallel compile jobs (default: number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
