#!/usr/bin/env bash
# Regenerates the tokenizer fixtures in tests/fixtures/tokenizers (a corpus,
# three byte-level BPE tokenizers trained with `tokenizers` in the manner of
# GPT-2, Llama 3 and Qwen2, a SentencePiece model, and the ids each library
# gives every corpus text; tests/fixtures/tokenizers/make_tokenizers.py says
# what). The fixtures are committed, so building and testing Trellis needs
# none of this. Uses the pinned virtual environment of
# scripts/fixtures_venv.sh (made on first use). Deterministic: a rerun with the same versions
# rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/tokenizers)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/tokenizers}
source scripts/fixtures_venv.sh
fixtures_venv_ensure
mkdir -p "$OUT"
"$FIXTURES_VENV/bin/python" tests/fixtures/tokenizers/make_tokenizers.py "$OUT"
