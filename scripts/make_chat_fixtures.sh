#!/usr/bin/env bash
# Regenerates the chat template fixtures in tests/fixtures/chat (templates in
# the formats of Llama 3.1, Qwen2.5, Qwen3, Mistral and ChatML, conversations
# with tool calls, and what transformers' apply_chat_template renders;
# tests/fixtures/chat/make_chat_fixtures.py says what). The fixtures are
# committed, so building and testing Trellis needs none of this. Uses the
# same pinned virtual environment as scripts/make_hf_fixtures.sh (made on
# first use); deterministic: a rerun with the same versions rewrites the
# same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/chat)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
VENV=${TRELLIS_FIXTURES_VENV:-.venv/fixtures}
OUT=${1:-tests/fixtures/chat}
PINNED=(torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy==2.4.6 tokenizers==0.23.3 jinja2==3.1.6)
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
"$VENV/bin/python" tests/fixtures/chat/make_chat_fixtures.py "$OUT"
