#!/usr/bin/env bash
# deploy/k8s without a cluster: schema validation and our own consistency
# checks (tests/deploy/k8s_manifests_test.py), on the venv that
# scripts/k8s_venv.sh makes.
#   tests/deploy/k8s_test.sh TRELLIS_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${TRELLIS_K8S_VENV:-$here/../../.venv/k8s}
if ! "$venv/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  echo "FAIL: no kubernetes-validate in $venv: run scripts/setup.sh (it calls scripts/k8s_venv.sh)" >&2
  exit 1
fi
TRELLIS_BINARY=${1:?usage: k8s_test.sh TRELLIS_BINARY} exec "$venv/bin/python" \
  "$here/k8s_manifests_test.py" -v
