#!/usr/bin/env bash
# deploy/slurm/trellis.sbatch on a real one-node Slurm cluster that this test
# brings up from Debian's packages (munge, slurmctld, slurmd): it writes a
# slurm.conf and cgroup.conf for this host into a temporary directory,
# starts munged, slurmctld and slurmd, submits the job with sbatch, waits for
# it (with a deadline), and checks that the job COMPLETED and that its
# outputs (per-step rewards, held-out accuracy, final weights) equal those
# of `trellis launch` of the same job. Security is on: the batch script
# makes the job's secret (OUT/slurm/secret, mode 600) and every step reads
# it. Then a job whose learner cannot start
# must end FAILED, the batch output naming the step, every step ended; and
# a cancelled job must still record every step's end.
#
# The job: the default job (its model, data, two actors and every role)
# with fewer steps (short_default.yaml, seed 1), so that each run takes
# seconds; TRELLIS_DEPLOY_FULL_JOB=1 runs the default job itself (minutes).
#
# The daemons run in a PID namespace of their own (unshare), so nothing
# outlives the test: the daemons are stopped in order, the test checks that
# no process of theirs is left, and the namespace's end kills whatever a
# failure left behind.
#
#   tests/deploy/slurm_test.sh TRELLIS_BINARY
# Needs root (slurmd, munged as root); exits 77 (skipped) otherwise.
set -euo pipefail
TRELLIS=$(realpath "${1:?usage: slurm_test.sh TRELLIS_BINARY}")
source "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: the Slurm daemons (slurmd, munged) need root; run as root"
  exit "$SKIPPED"
fi
for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo unshare; do
  command -v "$tool" >/dev/null ||
    fail "$tool not found: scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client"
done

if [ -z "${TRELLIS_SLURM_TEST_NAMESPACED:-}" ]; then
  exec env TRELLIS_SLURM_TEST_NAMESPACED=1 \
    unshare --pid --fork --mount-proc --kill-child "$0" "$TRELLIS"
fi

dir=$(mktemp -d /tmp/trellis-slurm.XXXXXX)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 755 "$dir" "$dir/munge"  # munged wants its socket's directories searchable
node=$(hostname)
daemons=()
job_ids=()

stop() {
  local rc=$?
  for id in "${job_ids[@]}"; do scancel "$id" 2>/dev/null || true; done
  # Reverse order: slurmd, slurmctld, munged.
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
    kill -TERM "${daemons[$i]}" 2>/dev/null || true
    timeout 20 tail --pid="${daemons[$i]}" -f /dev/null || kill -KILL "${daemons[$i]}" 2>/dev/null || true
    wait "${daemons[$i]}" 2>/dev/null || true
  done
  # This shell is PID 1 of the namespace: anything else is left over.
  ps -e -o pid=,comm= >"$dir/ps.txt"
  left=$(awk -v self=$$ '$1 != self && $2 != "ps"' "$dir/ps.txt")
  if [ -n "$left" ]; then
    echo "FAIL: processes left after teardown:" >&2
    echo "$left" >&2
    rc=1
  else
    log "teardown: no process left"
  fi
  if [ "$rc" -eq 0 ]; then rm -rf "$dir"; else echo "logs kept in $dir" >&2; fi
  exit "$rc"
}
trap stop EXIT
trap 'exit 1' INT TERM

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The reference run first, alone on the machine's cores.
job="$dir/job.yaml"
write_test_job "$job"
launch_reference "$job" "$dir/reference"

# munge: a fresh key, its own socket.
mungekey --create --keyfile="$dir/munge/munge.key"
munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --seed-file="$dir/munge/munge.seed" --pid-file="$dir/munge/munged.pid" \
  >"$dir/munge/munged.log" 2>&1 &
daemons+=($!)
wait_for_file "$dir/munge/munge.sock" 30 "${daemons[-1]}"

cpus=$(nproc)
cat >"$dir/slurm.conf" <<EOF
ClusterName=trellistest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=trellis Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
# No cgroup plugin is in use (linuxproc tracking); the file says so.
cat >"$dir/cgroup.conf" <<EOF
CgroupPlugin=autodetect
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=no
EOF
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -N "$node" -f "$SLURM_CONF" >"$dir/slurmd.out" 2>&1 &
daemons+=($!)

for ((waited = 0; ; waited++)); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [ "$state" != idle ] || break
  [ "$waited" -lt 600 ] ||
    { tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true; fail "node $node not idle after 60 s (state: ${state:-none})"; }
  sleep 0.1
done
log "one-node cluster up: node $node idle, $cpus CPUs"

sbatch_script="$DEPLOY_TEST_DIR/../../deploy/slurm/trellis.sbatch"

# submit JOB OUT: sbatch; the job's id goes to job_ids, its output to
# OUT.sbatch.out.
submit() {
  job_ids+=("$(sbatch --parsable --chdir="$dir" --output="$2.sbatch.out" \
    --export="ALL,TRELLIS=$TRELLIS,TRELLIS_OUT=$2" "$sbatch_script" "$1")")
  log "submitted job ${job_ids[-1]}: sbatch $sbatch_script $1"
}

# The state Slurm job ID ended in (COMPLETED, FAILED, ...), within
# RUN_DEADLINE.
final_state() {
  local state
  for ((waited = 0; ; waited++)); do
    state=$(scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in
      PENDING | CONFIGURING | RUNNING | COMPLETING) ;;
      *) break ;;
    esac
    [ "$waited" -lt $((RUN_DEADLINE * 10)) ] || fail "job $1 still $state after $RUN_DEADLINE s"
    sleep 0.1
  done
  echo "$state"
}

# Every step ended: one per worker of the placement, and the scheduler's.
expect_every_step_ended() {
  local steps workers
  steps=$(wc -l <"$1/slurm/steps.tsv")
  workers=$(($(wc -l <"$1/slurm/placement.tsv") - 1))
  [ "$steps" -eq $((workers + 1)) ] || {
    cat "$1.sbatch.out" "$1/slurm/steps.tsv"
    fail "$steps steps ended, expected $((workers + 1))"
  }
}

run="$dir/run"
started=$(date +%s)
submit "$job" "$run"
job_id=${job_ids[-1]}
state=$(final_state "$job_id")
log "job $job_id: $state after $(($(date +%s) - started)) s"
cat "$run.sbatch.out"
[ "$state" = COMPLETED ] ||
  fail "job $job_id ended $state ($(scontrol show job "$job_id" | grep -o 'ExitCode=[0-9:]*'))"
expect_every_step_ended "$run"
awk -F'\t' '$4 != 0 { exit 1 }' "$run/slurm/steps.tsv" || fail "a step failed: $(cat "$run/slurm/steps.tsv")"
log "steps: the scheduler and every worker exited 0"
[ "$(stat -c %a "$run/slurm/secret")" = 600 ] ||
  fail "the job's secret $run/slurm/secret is not mode 600: $(stat -c %a "$run/slurm/secret")"
log "security on: every step read the job's secret ($run/slurm/secret, mode 600)"
expect_same_outputs "$dir/reference" "$run"
log "the sbatch job's outputs equal trellis launch's"

# A job whose learner cannot start (its init_checkpoint is missing): the
# batch job fails, says which step failed, and every other step is stopped.
echo "model: {init_checkpoint: $dir/missing.safetensors}" >"$dir/missing-checkpoint.yaml"
"$TRELLIS" resolve "$job" --override "$dir/missing-checkpoint.yaml" >"$dir/broken-job.yaml"
broken="$dir/broken"
submit "$dir/broken-job.yaml" "$broken"
broken_id=${job_ids[-1]}
state=$(final_state "$broken_id")
log "job $broken_id (learner cannot start): $state"
[ "$state" = FAILED ] || { cat "$broken.sbatch.out"; fail "job $broken_id ended $state, expected FAILED"; }
grep -q "learner-0 failed" "$broken.sbatch.out" ||
  { cat "$broken.sbatch.out"; fail "the batch output does not name the failed step learner-0"; }
expect_every_step_ended "$broken"
grep -q "missing.safetensors" "$broken/slurm/learner-0.log" ||
  fail "learner-0's log does not say what is missing"

# A job cancelled once every step runs: the batch job records every step as
# it ends.
cancelled="$dir/cancelled"
submit "$job" "$cancelled"
cancelled_id=${job_ids[-1]}
for ((waited = 0; ; waited++)); do
  started=$(cat "$cancelled.sbatch.out" 2>/dev/null | grep -c "started " || true)
  [ "${started:-0}" -lt 6 ] || break
  [ "$waited" -lt $((RUN_DEADLINE * 10)) ] || fail "job $cancelled_id did not start every step"
  sleep 0.1
done
scancel "$cancelled_id"
state=$(final_state "$cancelled_id")
log "job $cancelled_id (cancelled): $state"
[ "$state" = CANCELLED ] || { cat "$cancelled.sbatch.out"; fail "job $cancelled_id ended $state, expected CANCELLED"; }
expect_every_step_ended "$cancelled"
log "PASS"
