#!/usr/bin/env bash
# scripts/gpu_check.sh's parts that need no GPU: its arguments, and on a
# machine without one, a run of every check that reports each as skipped
# with its reason in the summary table and exits 0 (1 with --require-gpu).
#   tests/gpu_check_test.sh BUILD_DIR
set -uo pipefail
readonly SKIPPED=77
build=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
script=scripts/gpu_check.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_exit() {  # code what command...
  local code=$1 what=$2
  shift 2
  "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  [ $rc -eq "$code" ] || fail "$what: exit $rc, expected $code; stderr: $(cat "$tmp/stderr")"
}

expect_exit 2 "an unknown argument" $script --bogus
grep -q "unknown argument '--bogus'" "$tmp/stderr" || fail "no message naming --bogus"
expect_exit 2 "an unknown check" $script --only weightsync,nope
grep -q "no check 'nope' (checks: gpu_tests grpo_colocated grpo_disaggregated weightsync)" \
  "$tmp/stderr" || fail "the unknown check's message does not list the checks"
expect_exit 2 "--build-dir without a value" $script --build-dir
expect_exit 2 "a build without trellis" $script --no-build --build-dir "$tmp"
grep -q "no trellis binary in '$tmp'" "$tmp/stderr" || fail "no message naming the build dir"
expect_exit 0 "--list" $script --list --build-dir "$build"
[ "$(grep -c '^[a-z]' "$tmp/stdout")" -eq 4 ] || fail "--list printed $(grep -c '^[a-z]' "$tmp/stdout") checks, not 4"
# The GPU paths' tests, each skipping here with its reason.
for gpu_test in tensor_parallel_gpu_test host_offload_gpu_test; do
  grep -q "^  $gpu_test\$" "$tmp/stdout" || fail "--list does not list $gpu_test"
done
expect_exit 0 "--help" $script --help
grep -q -- "--require-gpu" "$tmp/stdout" || fail "--help does not describe --require-gpu"

if command -v nvidia-smi >/dev/null && [ -n "$(nvidia-smi -L 2>/dev/null)" ]; then
  echo "a GPU is visible: the no-GPU run is not checked here (scripts/gpu_check.sh runs for real)"
  exit $SKIPPED
fi
expect_exit 1 "--require-gpu without a GPU" $script --no-build --build-dir "$build" --require-gpu
grep -q "no CUDA device visible" "$tmp/stderr" || fail "--require-gpu gave no reason"

expect_exit 0 "every check without a GPU" $script --no-build --build-dir "$build" --out "$tmp/out"
summary="$tmp/out/summary.md"
[ -f "$summary" ] || fail "no summary.md"
cat "$summary"
head -n 1 "$summary" | grep -q "| check | result | seconds | detail |" || fail "no table header"
rows=$(tail -n +3 "$summary")
[ -n "$rows" ] || fail "no rows"
if echo "$rows" | grep "| fail |"; then fail "a check failed without a GPU"; fi
for check in grpo_colocated grpo_disaggregated weightsync; do
  echo "$rows" | grep -q "^| $check | skip | [0-9]* | no CUDA device visible" ||
    fail "no skip row for $check naming the missing device"
done
# A GPU test skips whole, naming the device it lacks, or passes only its
# cases that need none and skips the others.
gpu_tests=$(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: //p')
[ -n "$gpu_tests" ] || fail "no test labelled gpu in the build"
for t in $gpu_tests; do
  echo "$rows" | grep -q -E "^\| $t \| (skip \| [0-9]+ \| .*CUDA|pass \| [0-9]+ \| [0-9]+ passed, [1-9][0-9]* skipped)" ||
    fail "$t: neither skipped naming CUDA nor passed with its GPU cases skipped"
done
echo "PASS"
