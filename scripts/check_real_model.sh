#!/usr/bin/env bash
# Checks a directory made by scripts/real_model.sh with transformers and
# writes its reference.safetensors (scripts/check_real_model.py says what),
# which tests/real_model_test.cc compares Trellis with. Uses the pinned
# virtual environment of scripts/fixtures_venv.sh (made on first use).
#   scripts/check_real_model.sh [MODEL_DIR]   (default models/smollm2-135m-instruct)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
source scripts/fixtures_venv.sh
fixtures_venv_ensure
"$FIXTURES_VENV/bin/python" scripts/check_real_model.py "${1:-models/smollm2-135m-instruct}"
