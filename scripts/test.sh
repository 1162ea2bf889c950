#!/usr/bin/env bash
# Installs, builds, and runs every test (ctest). Tests that need a GPU skip
# with a reason where none is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
