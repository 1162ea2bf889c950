#!/usr/bin/env bash
# Loads a finished model.path job's Hugging Face output (RUN_DIR/hf, and
# RUN_DIR/hf_adapter under LoRA) with transformers and peft;
# scripts/check_hf_run.py says what it prints. Uses the pinned virtual
# environment of scripts/fixtures_venv.sh (made on first use).
#   scripts/check_hf_run.sh RUN_DIR EVAL_JSONL [N]
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
source scripts/fixtures_venv.sh
fixtures_venv_ensure
"$FIXTURES_VENV/bin/python" scripts/check_hf_run.py "$@"
