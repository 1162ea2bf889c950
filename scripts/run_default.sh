#!/usr/bin/env bash
# Installs, builds, and runs the built-in default job: GRPO on the
# arithmetic task, every role in one process, on CPU. Outputs: runs/default/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh trellis
exec "$(scripts/build.sh --print-dir)/trellis" run --out "${OUT:-runs/default}" "$@"
