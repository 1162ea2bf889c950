#!/usr/bin/env bash
# Checks Trellis's exports against transformers and peft (docs/models.md,
# "Export"): model/testing/hf_export_writer exports the fixtures of
# tests/fixtures/hf, with LoRA adapters on three, and writes Trellis's logits;
# scripts/check_hf_export.py loads each export with transformers (and the
# adapters with peft) and fails when a logit differs by more than 1e-4.
#   scripts/check_hf_export.sh [--if-venv] [WRITER]
#   --if-venv   where the venv cannot be made (no network, no PyPI), exit
#               77 (ctest's skip) saying why rather than fail (ctest
#               hf_export_transformers runs it so)
#   WRITER      the hf_export_writer binary (default: built into
#               ${BUILD_DIR:-build} by scripts/build.sh)
#   TRELLIS_FIXTURES_VENV   the venv (default .venv/fixtures; made when
#                           absent, scripts/fixtures_venv.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fixtures_venv.sh
if [[ "${1:-}" == --if-venv ]]; then
  shift
  fixtures_venv_ensure_or_skip
fi
fixtures_venv_ensure
WRITER=${1:-}
if [[ -z "$WRITER" ]]; then
  scripts/build.sh hf_export_writer
  WRITER=${BUILD_DIR:-build}/model/hf_export_writer
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$WRITER" tests/fixtures/hf "$OUT"
"$FIXTURES_VENV/bin/python" scripts/check_hf_export.py "$OUT"
