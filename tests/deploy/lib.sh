# Shared by the deployment tests (sourced): the job they run and how two
# runs are compared. Needs TRELLIS (the binary) set by the caller.

DEPLOY_TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Exit status that CTest reports as "skipped" (SKIP_RETURN_CODE).
readonly SKIPPED=77

# How long a run may take: the short job takes well under a minute; the
# full default job (TRELLIS_DEPLOY_FULL_JOB=1) minutes, more on busy cores.
if [ "${TRELLIS_DEPLOY_FULL_JOB:-0}" = 0 ]; then RUN_DEADLINE=600; else RUN_DEADLINE=3600; fi
readonly RUN_DEADLINE

log() { echo "[$(date +%T)] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# The default job with fewer steps (short_default.yaml), seed 1, resolved
# into FILE; with TRELLIS_DEPLOY_FULL_JOB=1, the default job itself (minutes).
write_test_job() {
  local override=(--override "$DEPLOY_TEST_DIR/short_default.yaml")
  [ "${TRELLIS_DEPLOY_FULL_JOB:-0}" = 0 ] || override=()
  "$TRELLIS" resolve "${override[@]}" --seed 1 >"$1" ||
    fail "trellis resolve of the test job failed"
  log "job: the default job, seed 1${override[*]:+, with ${override[1]}}"
}

# Polls until FILE exists (the files waited for are written atomically);
# fails after SECONDS, or at once when the process PID (optional) has ended.
wait_for_file() {
  local file=$1 seconds=$2 pid=${3:-} waited=0
  while [ ! -e "$file" ]; do
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || fail "process $pid ended before $file appeared"
    [ "$waited" -lt $((seconds * 10)) ] || fail "$file did not appear within ${seconds} s"
    sleep 0.1
    waited=$((waited + 1))
  done
}

# `trellis launch JOB --out DIR`: the reference outputs.
launch_reference() {
  local job=$1 out=$2
  log "reference: trellis launch $job --out $out"
  timeout "$RUN_DEADLINE" "$TRELLIS" launch "$job" --out "$out" >"$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; fail "trellis launch of the reference run failed"; }
}

# Fails unless runs A and B have the same per-step mean rewards
# (ledger.jsonl), the same held-out accuracies (summary.json) and
# bit-identical final weights (policy.safetensors). Prints what it compared.
expect_same_outputs() {
  local a=$1 b=$2
  /usr/bin/python3 - "$a" "$b" <<'PY' || fail "outputs of $a and $b differ"
import json, sys

def steps(run):
    rewards = {}
    with open(f"{run}/ledger.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "step":
                rewards[record["step"]] = record["mean_reward"]
    return rewards

def accuracy(run):
    with open(f"{run}/summary.json") as f:
        s = json.load(f)
    return s["eval"]["before"]["accuracy"], s["eval"]["after"]["accuracy"]

a, b = sys.argv[1], sys.argv[2]
ra, rb = steps(a), steps(b)
print(f"per-step mean reward, {a}: {[ra[k] for k in sorted(ra)]}")
print(f"per-step mean reward, {b}: {[rb[k] for k in sorted(rb)]}")
print(f"held-out accuracy before/after: {accuracy(a)} vs {accuracy(b)}")
if not ra:
    sys.exit(f"{a}/ledger.jsonl has no step records")
if ra != rb:
    sys.exit("per-step rewards differ")
if accuracy(a) != accuracy(b):
    sys.exit("held-out accuracies differ")
PY
  cmp "$a/policy.safetensors" "$b/policy.safetensors" ||
    fail "policy.safetensors of $a and $b differ"
  echo "policy.safetensors: identical ($(stat -c %s "$a/policy.safetensors") bytes)"
}
