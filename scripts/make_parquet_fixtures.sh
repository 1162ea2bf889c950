#!/usr/bin/env bash
# Regenerates the Parquet dataset fixtures in tests/fixtures/parquet (plain
# and chat columns, shards in the Hugging Face hub's layout, and one file
# per fault; tests/fixtures/parquet/make_parquet_fixtures.py says what).
# The fixtures are committed, so building and testing Trellis needs none of
# this. Uses the pyarrow virtual environment of scripts/arrow_venv.sh (made
# on first use); deterministic: a rerun with the same pyarrow rewrites the
# same bytes.
#   TRELLIS_ARROW_VENV   where the venv goes (default: .venv/arrow)
#   $1                   output folder (default: tests/fixtures/parquet)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/parquet}
scripts/arrow_venv.sh >/dev/null
"${TRELLIS_ARROW_VENV:-.venv/arrow}/bin/python" tests/fixtures/parquet/make_parquet_fixtures.py "$OUT"
