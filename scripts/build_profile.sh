#!/usr/bin/env bash
# Measures where a cold build's CPU time goes: builds the named targets
# (default: trellis) from scratch, without ccache, in BUILD_DIR (default:
# build-profile), and logs the CPU seconds of every compile and link
# command, so that the numbers hold on a machine other builds share
# (docs/build.md).
#   scripts/build_profile.sh [TARGET ...]
#   BUILD_DIR  build directory, emptied first (default: build-profile)
#   JOBS       parallel jobs (default: number of cores)
# Writes BUILD_DIR/cpu_times.log, one line a command: user and system CPU
# seconds, wall seconds, output file; prints the total and the 15 costliest.
#   scripts/build_profile.sh --log FILE CMD...   (the launcher it installs)
set -euo pipefail
if [ "${1:-}" = --log ]; then
  log=$2
  shift 2
  out=unknown
  args=("$@")
  for ((i = 0; i < ${#args[@]} - 1; i++)); do
    [ "${args[$i]}" = -o ] && out=${args[$((i + 1))]}
  done
  exec /usr/bin/time -a -o "$log" -f "%U %S %e $out" "$@"
fi
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-profile}
JOBS=${JOBS:-$(nproc)}
[ $# -gt 0 ] || set -- trellis
rm -rf "$BUILD_DIR"
log=$(pwd)/$BUILD_DIR/cpu_times.log
launcher="$(pwd)/scripts/build_profile.sh;--log;$log"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" "-DCMAKE_CXX_LINKER_LAUNCHER=$launcher" \
  -DCMAKE_PREFIX_PATH="$(scripts/torch_venv.sh)" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
awk '{cpu += $1 + $2} END {printf "%d commands, %.0f CPU seconds (user+sys)\n", NR, cpu}' "$log"
awk '{printf "%7.1f  %s\n", $1 + $2, $4}' "$log" | sort -rn | head -15
