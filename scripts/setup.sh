#!/usr/bin/env bash
# Installs everything Trellis builds and runs with: Debian's packages, and
# LibTorch from PyPI's torch 2.x wheel in the venv of scripts/torch_venv.sh,
# Apache Arrow's Parquet reader from PyPI's pyarrow wheel in that of
# scripts/arrow_venv.sh. Idempotent: does nothing when every package is
# already installed and the venvs of scripts/torch_venv.sh,
# scripts/arrow_venv.sh and scripts/k8s_venv.sh exist.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  bubblewrap python3
  libgrpc++-dev protobuf-compiler-grpc python3-grpcio python3-protobuf grpc-proto
  libgloo-dev libxxhash-dev
  libcpp-httplib-dev prometheus chromium
  libpcre2-dev libsentencepiece-dev libicu-dev libseccomp-dev clang
  iproute2 munge slurmctld slurmd slurm-client python3-yaml python3-venv
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# PyPI, only inside the venvs they make: LibTorch 2.x, Arrow's C++ libraries,
# and the Kubernetes schemas for deploy/k8s.
"$(dirname "$0")/torch_venv.sh" >/dev/null
"$(dirname "$0")/arrow_venv.sh" >/dev/null
"$(dirname "$0")/k8s_venv.sh"
