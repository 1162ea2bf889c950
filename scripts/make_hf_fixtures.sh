#!/usr/bin/env bash
# Regenerates the Hugging Face model fixtures in tests/fixtures/hf (tiny
# random Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE and Mixtral models and what transformers
# computes with them; tests/fixtures/hf/make_fixtures.py says what). The
# fixtures are committed, so building and testing Trellis needs none of this.
# Makes .venv/fixtures with pinned PyPI packages on first use
# (scripts/fixtures_venv.sh); the fixtures are computed on the CPU.
# Deterministic: a rerun with the same versions rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/hf)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/hf}
source scripts/fixtures_venv.sh
fixtures_venv_ensure
mkdir -p "$OUT"
"$FIXTURES_VENV/bin/python" tests/fixtures/hf/make_fixtures.py "$OUT"
