#!/usr/bin/env bash
# Makes .venv/arrow (Debian's python3 -m venv) with PyPI's pyarrow wheel:
# Apache Arrow's C++ libraries (libarrow, libparquet) and headers, which
# data/internal/parquet_reader.cc reads Parquet datasets with, and the
# Python package scripts/make_parquet_fixtures.sh writes the test files
# with. The wheel's libraries use the C++11 string ABI and need libstdc++'s
# GLIBCXX_3.4.22 at most (docs/data.md). Idempotent. Prints the wheel's
# folder (include/ and the libraries, with the unversioned libarrow.so and
# libparquet.so links pyarrow.create_library_symlinks makes), which
# scripts/build.sh passes to CMake as TRELLIS_ARROW_DIR.
#   TRELLIS_ARROW_VENV   where (default: .venv/arrow in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRELLIS_ARROW_VENV:-.venv/arrow}
VERSION=25.0.1
if [ "$("$VENV/bin/python" -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null)" \
  != "$VERSION" ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "pyarrow==$VERSION" >&2
  echo "arrow_venv: $VENV made (pyarrow==$VERSION)" >&2
else
  echo "arrow_venv: $VENV ready (pyarrow==$VERSION)" >&2
fi
"$VENV/bin/python" -c 'import os, pyarrow
pyarrow.create_library_symlinks()
print(os.path.dirname(pyarrow.__file__))'
