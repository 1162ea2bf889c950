#!/usr/bin/env bash
# Makes .venv/trl (Debian's python3 -m venv) with pinned PyPI packages for
# bench/trl_grpo.py: TRL's GRPOTrainer over the torch wheel Trellis builds
# against (2.15.0), transformers and peft as scripts/fixtures_venv.sh pins
# them, and the versions of trl, accelerate and datasets that install
# together with those. Its torch is the build's own
# (scripts/venv_with_torch.sh), not fetched again.
# Nothing comes from the Hugging Face hub: the bench reads a local model
# directory and a local JSON-lines file. Idempotent: skips when every pinned
# version is there. Prints the environment's path.
#   TRELLIS_TRL_VENV   where (default: .venv/trl in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_TRL_VENV:-.venv/trl}
PINNED=(torch==2.15.0 transformers==5.24.0 peft==0.21.2 trl==1.16.0 accelerate==1.16.0
        datasets==5.2.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6 jinja2==3.1.6)
ready() {
  "$VENV/bin/python" - "${PINNED[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
}
if ! ready; then
  source scripts/venv_with_torch.sh
  make_venv_with_torch "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINNED[@]}" >&2
  echo "trl_venv: $VENV made (${PINNED[*]})" >&2
else
  echo "trl_venv: $VENV ready" >&2
fi
echo "$VENV"
