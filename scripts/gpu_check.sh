#!/usr/bin/env bash
# Runs every GPU check of Trellis and prints one summary table
# (docs/gpu.md, "The GPU check script"). Made for a machine with one NVIDIA
# GPU, 16 cores and no network; fits in 8 minutes there with a build at
# hand. Without a visible GPU every check still runs and reports "skip"
# with its reason (the GPU tests skip themselves; the GPU jobs are refused
# before they allocate), so the script's own parts are tested on CPU
# (tests/gpu_check_test.sh).
#
#   scripts/gpu_check.sh [--build-dir DIR] [--no-build] [--out DIR]
#                        [--only CHECK[,CHECK...]] [--require-gpu] [--list]
#
#   --build-dir DIR  the build to use (default: scripts/build.sh --print-dir)
#   --no-build       use DIR as it is (a build carried to the machine);
#                    otherwise scripts/build.sh brings it up to date first
#   --out DIR        logs and run directories (default: runs/gpu_check)
#   --only CHECKS    run only these checks (names as --list prints them)
#   --require-gpu    exit 1 when no GPU is visible (on the GPU machine)
#   --list           print the checks, one a line, then each CTest test
#                    labelled gpu in the build (indented under gpu_tests:
#                    the NCCL and CUDA paths' tests), and exit
#
# Exit: 0 when no check failed (skips are not failures), 1 when one did or
# --require-gpu found no GPU, 2 for bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."

CHECKS=(gpu_tests grpo_colocated grpo_disaggregated weightsync)
# Seconds each check may take; together within the 8-minute budget.
declare -A LIMIT=([gpu_tests]=180 [grpo_colocated]=90 [grpo_disaggregated]=90 [weightsync]=90)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_check: $*" >&2; exit 2; }

build_dir=$(scripts/build.sh --print-dir)
build=1
out=runs/gpu_check
only=""
require_gpu=0
list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; build_dir=$2; shift ;;
    --no-build) build=0 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift ;;
    --only) [ $# -ge 2 ] || die "--only needs check names"; only=$2; shift ;;
    --require-gpu) require_gpu=1 ;;
    --list) list=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (scripts/gpu_check.sh --help lists them)" ;;
  esac
  shift
done

if [ "$list" = 1 ]; then
  printf '%s\n' "${CHECKS[@]}"
  if [ -f "$build_dir/CTestTestfile.cmake" ]; then
    ctest --test-dir "$build_dir" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: /  /p'
  fi
  exit 0
fi

selected=("${CHECKS[@]}")
if [ -n "$only" ]; then
  IFS=, read -r -a selected <<<"$only"
  for c in "${selected[@]}"; do
    [ -n "${LIMIT[$c]:-}" ] || die "--only: no check '$c' (checks: ${CHECKS[*]})"
  done
fi

if [ "$build" = 1 ]; then
  BUILD_DIR=$build_dir scripts/build.sh >"${TMPDIR:-/tmp}/gpu_check_build.log" 2>&1 ||
    { tail -n 30 "${TMPDIR:-/tmp}/gpu_check_build.log"; echo "gpu_check: build failed" >&2; exit 1; }
fi
[ -x "$build_dir/trellis" ] || die "no trellis binary in '$build_dir' (build it, or give --build-dir)"
mkdir -p "$out" || die "cannot make --out '$out'"

# A visible GPU, by the driver's own listing.
gpu=""
no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null; then
  no_gpu_reason="no CUDA device visible: nvidia-smi not found (no NVIDIA driver)"
elif ! gpu=$(nvidia-smi -L 2>/dev/null | head -n 1) || [ -z "$gpu" ]; then
  no_gpu_reason="no CUDA device visible: nvidia-smi -L lists none"
fi
echo "gpu_check: ${gpu:-$no_gpu_reason}"
if [ -n "$no_gpu_reason" ] && [ "$require_gpu" = 1 ]; then
  echo "gpu_check: --require-gpu: $no_gpu_reason" >&2
  exit 1
fi

rows=()  # "check|result|seconds|detail"
failed=0
record() {  # check result seconds detail
  rows+=("$1|$2|$3|$4")
  [ "$2" = fail ] && failed=1
  return 0
}

# One row per CTest test labelled gpu: pass (with how many of its cases
# passed and skipped), fail, or skip when every case skipped, with the
# reason the first one gave (GTEST_SKIP's message).
check_gpu_tests() {
  local names name log start rc ok skipped reason
  names=$(ctest --test-dir "$build_dir" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: //p')
  [ -n "$names" ] || { record gpu_tests fail 0 "no test labelled gpu in $build_dir"; return; }
  for name in $names; do
    log="$out/$name.log"
    start=$SECONDS
    timeout "${LIMIT[gpu_tests]}" ctest --test-dir "$build_dir" -R "^${name}\$" -V >"$log" 2>&1
    rc=$?
    ok=$(grep -c '\[       OK \]' "$log")
    skipped=$(grep -c '\[  SKIPPED \] [A-Za-z]' "$log")
    if [ $rc -ne 0 ]; then
      record "$name" fail $((SECONDS - start)) "exit $rc, $log"
    elif [ "$ok" -eq 0 ]; then
      reason=$(grep -m1 -A1 ': Skipped$' "$log" | tail -n 1 | sed 's/^[0-9]*: //')
      record "$name" skip $((SECONDS - start)) "${reason:-no case ran}"
    else
      record "$name" pass $((SECONDS - start)) "$ok passed, $skipped skipped"
    fi
  done
}

# A short GRPO job on the GPU: held-out accuracy before and after, and the
# largest share of a role's device peak the ledger could not attribute.
check_job() {  # check placement
  local run="$out/$1" log="$out/$1.log" start=$SECONDS rc
  rm -rf "$run"
  timeout "${LIMIT[$1]}" "$build_dir/trellis" run "examples/jobs/gpu_$2.yaml" --out "$run" \
    >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    if [ -n "$no_gpu_reason" ]; then
      record "$1" skip $((SECONDS - start)) "$no_gpu_reason (trellis refused: exit $rc)"
    else
      record "$1" fail $((SECONDS - start)) "exit $rc, $log"
    fi
    return
  fi
  record "$1" pass $((SECONDS - start)) "$(python3 scripts/gpu_check_summary.py "$run")"
}

# Weight sync on the device against the measured device-to-device copy
# (bench/weightsync_gpu.cc): the 1 GB rows, each transport's GB/s and its
# share of the copy.
check_weightsync() {
  local log="$out/weightsync.log" start=$SECONDS rc
  timeout "${LIMIT[weightsync]}" "$build_dir/bench/weightsync_bench" --gpu >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    record weightsync fail $((SECONDS - start)) "exit $rc, $log"
  elif grep -q '^weightsync_bench --gpu: skipped' "$log"; then
    record weightsync skip $((SECONDS - start)) "$(sed -n 's/^weightsync_bench --gpu: skipped: //p' "$log")"
  else
    record weightsync pass $((SECONDS - start)) \
      "$(awk '$1 == "1000MB" && $2 != "D2D" {printf "%s%s %s GB/s (%s of D2D)", sep, $2, $3, $4; sep = ", "}' "$log")"
  fi
}

for c in "${selected[@]}"; do
  case "$c" in
    gpu_tests) check_gpu_tests ;;
    grpo_colocated) check_job grpo_colocated colocated ;;
    grpo_disaggregated) check_job grpo_disaggregated disaggregated ;;
    weightsync) check_weightsync ;;
  esac
done

{
  echo "| check | result | seconds | detail |"
  echo "|---|---|---|---|"
  for r in "${rows[@]}"; do
    IFS='|' read -r name result secs detail <<<"$r"
    echo "| $name | $result | $secs | $detail |"
  done
} >"$out/summary.md"
echo
cat "$out/summary.md"
exit $failed
