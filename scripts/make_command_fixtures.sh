#!/usr/bin/env bash
# Regenerates tests/fixtures/commands/expected.json: the ids `tokenizers`
# gives a few texts under committed tokenizers, and what transformers'
# apply_chat_template renders for a few conversations under committed chat
# templates, which tools/answer_commands_test.cc compares `trellis
# tokenize` and `trellis chat` with (tests/fixtures/commands/
# make_command_fixtures.py says what). The fixtures are committed, so
# building and testing Trellis needs none of this. Uses the pinned virtual
# environment of scripts/fixtures_venv.sh (made on first use);
# deterministic: a rerun with the same versions rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
#   $1                      output folder (default: tests/fixtures/commands)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/commands}
source scripts/fixtures_venv.sh
fixtures_venv_ensure
mkdir -p "$OUT"
"$FIXTURES_VENV/bin/python" tests/fixtures/commands/make_command_fixtures.py "$OUT"
