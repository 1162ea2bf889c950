#!/usr/bin/env bash
# Makes .venv/k8s (Debian's python3 -m venv) with kubernetes-validate from
# PyPI: the Kubernetes OpenAPI schemas, bundled, for checking deploy/k8s
# offline (tests/deploy/k8s_test.sh). Idempotent. scripts/setup.sh calls it.
#   TRELLIS_K8S_VENV   where (default: .venv/k8s in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_K8S_VENV:-.venv/k8s}
PINNED=kubernetes-validate==1.37.0
if "$VENV/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  echo "k8s_venv: $VENV ready"
  exit 0
fi
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$PINNED"
echo "k8s_venv: $VENV made ($PINNED)"
