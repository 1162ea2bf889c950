#!/usr/bin/env bash
# Regenerates the example Hugging Face model of examples/jobs/hf_grpo.yaml
# (examples/models/qwen2_arith: a tiny Qwen2 with a byte-level BPE tokenizer
# and a ChatML chat template) and its chat-formatted arithmetic data
# (examples/data/chat_arith_{train,eval}.jsonl);
# examples/models/make_qwen2_arith.py says what. Both are committed, so
# running the example needs none of this. Uses the pinned virtual
# environment of scripts/fixtures_venv.sh (made on first use);
# deterministic: a rerun with the same versions rewrites the same bytes.
#   TRELLIS_FIXTURES_VENV   where the venv goes (default: .venv/fixtures)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
source scripts/fixtures_venv.sh
fixtures_venv_ensure
"$FIXTURES_VENV/bin/python" examples/models/make_qwen2_arith.py examples/models/qwen2_arith examples/data
