#!/usr/bin/env bash
# Makes .venv/torch (Debian's python3 -m venv) with PyPI's torch wheel: the
# LibTorch 2.x Trellis builds against (headers, shared libraries, CMake
# package; CUDA-enabled, C++11 ABI). Idempotent. Prints the CMake prefix
# path to build against it (scripts/build.sh; docs/libtorch.md): the
# wheel's CMake package, then the wheel's own folder, so TorchConfig's
# find_library finds the wheel's lib/libtorch.so before any other on the
# system, such as Debian's libtorch-dev in /usr/lib (it only gives the
# wheel's lib/ as a late PATHS).
#   TRELLIS_TORCH_VENV   where (default: .venv/torch in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_TORCH_VENV:-.venv/torch}
VERSION=2.15.0
prefix_path() {
  "$VENV/bin/python" -W ignore -c 'import os, torch
print(torch.utils.cmake_prefix_path + ";" + os.path.dirname(torch.__file__))'
}
if [ "$("$VENV/bin/python" -W ignore -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" \
  != "$VERSION" ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==$VERSION" >&2
  echo "torch_venv: $VENV made (torch==$VERSION)" >&2
else
  echo "torch_venv: $VENV ready (torch==$VERSION)" >&2
fi
prefix_path
