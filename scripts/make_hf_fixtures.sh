#!/usr/bin/env bash
# Regenerates the Hugging Face model fixtures in tests/fixtures/hf (tiny
# random Llama, Qwen2, Qwen3 and Mistral models and what transformers
# computes with them; tests/fixtures/hf/make_fixtures.py says what). The
# fixtures are committed, so building and testing Trellis needs none of this.
# Makes .venv/fixtures (python3 -m venv) with pinned PyPI packages on first
# use; the torch wheel brings its CUDA libraries, some GB, though the
# fixtures are computed on the CPU. Deterministic: a rerun with the same
# versions rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/hf)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_FIXTURES_VENV:-.venv/fixtures}
OUT=${1:-tests/fixtures/hf}
PINNED=(torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy==2.4.6)
if ! "$VENV/bin/python" - "${PINNED[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINNED[@]}"
fi
mkdir -p "$OUT"
"$VENV/bin/python" tests/fixtures/hf/make_fixtures.py "$OUT"
