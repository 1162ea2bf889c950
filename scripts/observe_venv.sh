# shellcheck shell=bash
# The Python environment tests/observe_tools_test.sh reads a run's metrics
# back with: PyPI's tensorboard (its event reader) and mlflow (a tracking
# server and its client), pinned, in a virtual environment,
# TRELLIS_OBSERVE_VENV (default .venv/observe). docs/observe.md.
# Sourced, from the repository root; defines:
#   OBSERVE_VENV             the environment's path
#   OBSERVE_PINNED           the packages, each name==version
#   observe_venv_ready       whether OBSERVE_VENV has every pinned version
#   observe_venv_ensure      makes OBSERVE_VENV (python3 -m venv, pip
#                            install; about 1 GB) unless it is ready
OBSERVE_VENV=${TRELLIS_OBSERVE_VENV:-.venv/observe}
OBSERVE_PINNED=(tensorboard==2.21.0 mlflow==3.17.2)

observe_venv_ready() {
  "$OBSERVE_VENV/bin/python" - "${OBSERVE_PINNED[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
}

observe_venv_ensure() {
  if ! observe_venv_ready; then
    /usr/bin/python3 -m venv "$OBSERVE_VENV" &&
      "$OBSERVE_VENV/bin/pip" install --quiet --disable-pip-version-check "${OBSERVE_PINNED[@]}"
  fi
}
