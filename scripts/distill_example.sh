#!/usr/bin/env bash
# On-policy distillation on the default job's task (docs/algorithms.md
# "distill"): trains the teacher (examples/jobs/distill_teacher.yaml), then
# the student from it (examples/jobs/distill.yaml) and, as a baseline, the
# same student with plain grpo for the same steps (distill.yaml with
# algorithm grpo). Prints each run's held-out accuracy (greedy) before and
# after and its wall time. No downloads.
#   scripts/distill_example.sh        (build/trellis built: scripts/build.sh trellis)
# distill.yaml reads the teacher from runs/distill_example/teacher, so the
# runs go under runs/distill_example (relative to the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
trellis=${TRELLIS:-build/trellis}
out=runs/distill_example
mkdir -p "$out"
run() {  # NAME JOB [ARGS...]
  local name=$1 job=$2
  shift 2
  local start=$SECONDS
  "$trellis" run "$job" --out "$out/$name" "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; exit 1; }
  echo "$name: $(grep 'held-out accuracy' "$out/$name.log")  wall $((SECONDS - start)) s"
}
[ -f "$out/teacher/policy.safetensors" ] || run teacher examples/jobs/distill_teacher.yaml
run distill examples/jobs/distill.yaml
echo 'algorithm: grpo' >"$out/grpo_override.yaml"
run grpo_baseline examples/jobs/distill.yaml --override "$out/grpo_override.yaml"
