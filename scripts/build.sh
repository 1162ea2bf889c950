#!/usr/bin/env bash
# Configures and builds Trellis (Release) into build/.
#   scripts/build.sh [TARGET ...]   builds the named targets (default: all)
#   BUILD_DIR   build directory (default: build)
#   JOBS        parallel compile jobs (default: number of cores)
#   TRELLIS_TORCH  which LibTorch: debian (default; Debian's 1.13) or pypi
#               (PyPI's torch 2.x wheel in .venv/torch, made by
#               scripts/torch_venv.sh; BUILD_DIR default build-torch2)
set -euo pipefail
cd "$(dirname "$0")/.."
torch=()
case "${TRELLIS_TORCH:-debian}" in
  debian) BUILD_DIR=${BUILD_DIR:-build} ;;
  pypi)
    BUILD_DIR=${BUILD_DIR:-build-torch2}
    torch=(-DCMAKE_PREFIX_PATH="$(scripts/torch_venv.sh)")
    ;;
  *)
    echo "build.sh: TRELLIS_TORCH=${TRELLIS_TORCH} is not debian or pypi" >&2
    exit 2
    ;;
esac
JOBS=${JOBS:-$(nproc)}
# ccache (from setup.sh) makes rebuilds and other checkouts' builds cheap;
# TRELLIS_NO_CCACHE=1 measures a truly clean build.
launcher=()
if command -v ccache >/dev/null && [ -z "${TRELLIS_NO_CCACHE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${torch[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
