#!/usr/bin/env bash
# Regenerates the chat template fixtures in tests/fixtures/chat (templates in
# the formats of Llama 3.1, Qwen2.5, Qwen3, Mistral and ChatML, conversations
# with tool calls, and what transformers' apply_chat_template renders;
# tests/fixtures/chat/make_chat_fixtures.py says what). The fixtures are
# committed, so building and testing Trellis needs none of this. Uses the
# pinned virtual environment of scripts/fixtures_venv.sh (made on first
# use); deterministic: a rerun with the same versions rewrites the
# same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/chat)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/chat}
source scripts/fixtures_venv.sh
fixtures_venv_ensure
mkdir -p "$OUT"
"$FIXTURES_VENV/bin/python" tests/fixtures/chat/make_chat_fixtures.py "$OUT"
