#!/usr/bin/env bash
# Configures and builds Trellis (Release) against PyPI's LibTorch 2.x (the
# torch wheel, CUDA-enabled, in the venv of scripts/torch_venv.sh; see
# docs/libtorch.md) and Apache Arrow's Parquet reader from PyPI's pyarrow
# wheel (scripts/arrow_venv.sh; docs/data.md).
#   scripts/build.sh [TARGET ...]   builds the named targets (default: all)
#   scripts/build.sh --print-dir    prints the build directory and exits
#   BUILD_DIR   build directory (default: build)
#   JOBS        parallel compile jobs (default: number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ "${1:-}" = --print-dir ]; then
  echo "$BUILD_DIR"
  exit 0
fi
JOBS=${JOBS:-$(nproc)}
# ccache (from setup.sh) makes rebuilds and other checkouts' builds cheap;
# TRELLIS_NO_CCACHE=1 measures a truly clean build.
launcher=()
if command -v ccache >/dev/null && [ -z "${TRELLIS_NO_CCACHE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$(scripts/torch_venv.sh)" -DTRELLIS_ARROW_DIR="$(scripts/arrow_venv.sh)" \
  >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
