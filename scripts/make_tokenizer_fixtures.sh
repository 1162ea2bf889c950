#!/usr/bin/env bash
# Regenerates the tokenizer fixtures in tests/fixtures/tokenizers (a corpus,
# three byte-level BPE tokenizers trained with `tokenizers` in the manner of
# GPT-2, Llama 3 and Qwen2, a SentencePiece model, and the ids each library
# gives every corpus text; tests/fixtures/tokenizers/make_tokenizers.py says
# what). The fixtures are committed, so building and testing Trellis needs
# none of this. Makes .venv/fixtures (python3 -m venv) with pinned PyPI
# packages on first use. Deterministic: a rerun with the same versions
# rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/tokenizers)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_FIXTURES_VENV:-.venv/fixtures}
OUT=${1:-tests/fixtures/tokenizers}
PINNED=(tokenizers==0.23.3 sentencepiece==0.2.3)
if ! "$VENV/bin/python" - "${PINNED[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
then
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINNED[@]}"
fi
mkdir -p "$OUT"
"$VENV/bin/python" tests/fixtures/tokenizers/make_tokenizers.py "$OUT"
