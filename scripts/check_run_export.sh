#!/usr/bin/env bash
# Checks a run's Hugging Face export against transformers (docs/models.md,
# "Export"): scripts/check_run_export.py loads RUN_DIR/hf with transformers
# (no missing, unexpected or mismatched tensor) and fails unless each of its
# weights equals the run's trained policy, RUN_DIR/policy.safetensors, in
# the export's dtype. A sharded learner writes both from weights gathered
# unit by unit (docs/parallelism.md).
#   scripts/check_run_export.sh [--if-venv] RUN_DIR
#   --if-venv   where the venv cannot be made (no network, no PyPI), exit
#               77 (ctest's skip) saying why rather than fail
#   TRELLIS_FIXTURES_VENV   the venv (default .venv/fixtures; made when
#                           absent, scripts/fixtures_venv.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fixtures_venv.sh
if [[ "${1:-}" == --if-venv ]]; then
  shift
  fixtures_venv_ensure_or_skip
fi
[[ $# -eq 1 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
fixtures_venv_ensure
"$FIXTURES_VENV/bin/python" scripts/check_run_export.py "$1"
