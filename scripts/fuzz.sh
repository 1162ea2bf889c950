#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang and AddressSanitizer into
# build-fuzz/ and runs each for a given time.
#   scripts/fuzz.sh TARGET|all SECONDS [libFuzzer flags ...]
#     TARGET    one of fuzz/CMakeLists.txt's targets (job_yaml_fuzzer, ...)
#     SECONDS   how long each target runs; 0 runs each seed of
#               fuzz/corpus/<target>/ once (a smoke test)
#   JOBS        parallel compile jobs (default: number of cores)
# Prints per target the executions, the inputs in its corpus and whether it
# crashed. New inputs go to build-fuzz/corpus/<target>/ (the committed seeds
# in fuzz/corpus/<target>/ are only read); a crash, a leak, a timeout or an
# out-of-memory leaves its input in build-fuzz/crashes/<target>/, and the
# script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
which_target=$1
seconds=$2
shift 2
BUILD_DIR=build-fuzz
JOBS=${JOBS:-$(nproc)}
targets=$(sed -n 's/^trellis_fuzzer(\([a-z_]*\).*/\1/p' fuzz/CMakeLists.txt)
if [ "$which_target" != all ]; then
  if ! grep -qx "$which_target" <<<"$targets"; then
    echo "fuzz.sh: unknown target $which_target; targets: $(echo $targets)" >&2
    exit 2
  fi
  targets=$which_target
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTRELLIS_FUZZ=ON \
  -DTRELLIS_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DTRELLIS_ARROW_DIR="$(scripts/arrow_venv.sh)" \
  "${launcher[@]}" >/dev/null
build=()
for t in $targets; do build+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${build[@]}"

failed=0
printf '%-24s %12s %8s  %s\n' target executions corpus result
for t in $targets; do
  seeds=fuzz/corpus/$t
  work=$BUILD_DIR/corpus/$t
  crashes=$BUILD_DIR/crashes/$t
  log=$BUILD_DIR/logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  flags=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "-artifact_prefix=$crashes/")
  if [ "$seconds" = 0 ]; then
    args=("${flags[@]}" "$seeds"/*)
  else
    args=("${flags[@]}" "-max_total_time=$seconds" "$work" "$seeds")
  fi
  if "$BUILD_DIR/fuzz/$t" "${args[@]}" "$@" >"$log" 2>&1; then
    result=ok
  else
    result="CRASH (see $log; input in $crashes/)"
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$seconds" = 0 ]; then
    corpus=$(ls "$seeds" | wc -l)
  else
    corpus=$(find "$work" "$seeds" -type f | wc -l)
  fi
  printf '%-24s %12s %8s  %s\n' "$t" "${execs:-?}" "$corpus" "$result"
done
exit $failed
