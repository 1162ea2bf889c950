#!/usr/bin/env bash
# Several hosts, for real networking on one machine: the scheduler and every
# worker of the job (`trellis place`: learner, reference, verifier, each
# actor) run in a network namespace of their own, joined by veth pairs to a
# bridge in one more namespace (the switch); nothing is added to the host's
# own namespace. A namespace's loopback reaches only that namespace (the
# learner dials its own weight store), so the services can only reach each
# other over those links. Each service listens on its namespace's address
# and advertises it (gloo weight transport, learner -> actors). Security is
# on: every process reads the job's secret (--secret-file), and a fake actor
# with another secret is refused (UNAUTHENTICATED) and takes no slot.
#
# The job: the default job with fewer steps (short_default.yaml, seed 1);
# TRELLIS_DEPLOY_FULL_JOB=1 runs the default job itself (minutes).
# Checks: the run completes; every worker registered from its own
# namespace's address (workers.tsv); sampled every second while the job
# runs, every listening socket in a namespace is on that namespace's
# address (none on a wildcard, the learner's rendezvous store included),
# and every TCP connection runs from that address to another namespace's
# (none over loopback); the outputs (per-step rewards,
# held-out accuracy, final weights) equal those of `trellis launch` of the
# same job. Everything started is stopped and every namespace deleted, on
# success or failure.
#
#   tests/deploy/netns_test.sh TRELLIS_BINARY
# Needs root (ip netns); exits 77 (skipped) otherwise.
set -euo pipefail
TRELLIS=${1:?usage: netns_test.sh TRELLIS_BINARY}
source "$(dirname "$0")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: network namespaces need root (ip netns add); run as root"
  exit "$SKIPPED"
fi
command -v ip >/dev/null || { echo "SKIPPED: no ip (iproute2; scripts/setup.sh installs it)"; exit "$SKIPPED"; }
command -v ss >/dev/null || { echo "SKIPPED: no ss (iproute2)"; exit "$SKIPPED"; }

work=$(mktemp -d /tmp/trellis-netns.XXXXXX)
tag="tn$$"  # namespace names: unique per test process
switch="$tag-sw"
subnet=10.213.$(($$ % 250)).0
namespaces=()
pids=()

cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 1
  for ns in "${namespaces[@]}"; do
    # Whatever still runs in our namespaces was started by this test.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do
    if [ -n "$(ip netns pids "$ns" 2>/dev/null)" ]; then
      echo "FAIL: processes left in $ns: $(ip netns pids "$ns")" >&2
      rc=1
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
  if [ "$rc" -eq 0 ]; then rm -rf "$work"; else echo "logs kept in $work" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# One "host": a namespace with eth0 (ADDRESS/24) on the switch's bridge.
add_host() {
  local name=$1 address=$2 port="p${#namespaces[@]}"
  local ns="$tag-$name"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip link add eth0 netns "$ns" type veth peer name "$port" netns "$switch"
  ip -n "$switch" link set "$port" master br0 up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

ip netns add "$switch"
namespaces+=("$switch")
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up

job="$work/job.yaml"
write_test_job "$job"
"$TRELLIS" place "$job" >"$work/placement.tsv" || fail "trellis place failed"

# Addresses: .1 the scheduler, then one per worker in placement order.
declare -A address
address[scheduler]=${subnet%.0}.1
add_host scheduler "${address[scheduler]}"
host_number=2
while IFS=$'\t' read -r id role index _; do
  address[$id]=${subnet%.0}.$host_number
  add_host "$id" "${address[$id]}"
  host_number=$((host_number + 1))
done < <(tail -n +2 "$work/placement.tsv")
log "hosts: $(for h in "${!address[@]}"; do printf '%s=%s ' "$h" "${address[$h]}"; done)"

# The job's secret, and another one for the fake actor.
for f in secret wrong_secret; do
  (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/$f")
done

run="$work/run"
started=$(date +%s)
ip netns exec "$tag-scheduler" "$TRELLIS" serve scheduler --job "$job" --out "$run" \
  --listen "${address[scheduler]}:0" --address-file "$work/scheduler.addr" \
  --secret-file "$work/secret" >"$work/scheduler.log" 2>&1 &
scheduler_pid=$!
pids+=("$scheduler_pid")
wait_for_file "$work/scheduler.addr" 60 "$scheduler_pid"
scheduler_address=$(cat "$work/scheduler.addr")
[ "$scheduler_address" != "${scheduler_address#"${address[scheduler]}":}" ] ||
  fail "the scheduler advertises $scheduler_address, not its namespace's ${address[scheduler]}"

# A fake actor first, from the scheduler's namespace, with the wrong secret.
fake_rc=0
timeout 60 ip netns exec "$tag-scheduler" "$TRELLIS" serve actor \
  --scheduler "$scheduler_address" --listen "${address[scheduler]}:0" --index 0 \
  --secret-file "$work/wrong_secret" >"$work/fake-actor.log" 2>&1 || fake_rc=$?
[ "$fake_rc" -ne 0 ] && grep -q UNAUTHENTICATED "$work/fake-actor.log" ||
  fail "a fake actor with the wrong secret was not refused (exit $fake_rc; $work/fake-actor.log)"
log "a fake actor with the wrong secret: refused (UNAUTHENTICATED)"

while IFS=$'\t' read -r id role index _; do
  ip netns exec "$tag-$id" "$TRELLIS" serve "$role" --scheduler "$scheduler_address" \
    --listen "${address[$id]}:0" --index "$index" --secret-file "$work/secret" \
    >"$work/$id.log" 2>&1 &
  pids+=($!)
done < <(tail -n +2 "$work/placement.tsv")

# Every TCP socket of every namespace, once a second while the job runs.
(
  while kill -0 "$scheduler_pid" 2>/dev/null; do
    for ns in "${namespaces[@]}"; do
      [ "$ns" = "$switch" ] && continue
      echo "== $ns"
      ip netns exec "$ns" ss -Htna
    done
    sleep 1
  done >"$work/sockets.txt"
) &
sampler_pid=$!
wait_for_file "$run/workers.tsv" 120 "$scheduler_pid"

timeout "$RUN_DEADLINE" tail --pid="$scheduler_pid" -f /dev/null ||
  fail "the job did not finish within $RUN_DEADLINE s"
scheduler_rc=0
wait "$scheduler_pid" || scheduler_rc=$?
pids=("${pids[@]:1}")  # reaped: its id may belong to another process now
log "scheduler exited with $scheduler_rc after $(($(date +%s) - started)) s"
wait "$sampler_pid"
[ "$scheduler_rc" -eq 0 ] || { tail -20 "$work/scheduler.log" >&2; fail "the scheduler failed"; }
while [ ${#pids[@]} -gt 0 ]; do
  pid=${pids[0]}
  timeout 30 tail --pid="$pid" -f /dev/null || fail "worker $pid did not exit after the job"
  rc=0
  wait "$pid" || rc=$?
  pids=("${pids[@]:1}")
  [ "$rc" -eq 0 ] || fail "worker $pid exited with $rc (logs: $work)"
done

# Each worker registered with its own namespace's address.
while IFS=$'\t' read -r id worker_address _; do
  [ "$id" = id ] && continue
  [ "${worker_address%:*}" = "${address[$id]}" ] ||
    fail "$id registered $worker_address, not its namespace's ${address[$id]}"
done <"$run/workers.tsv"
log "workers.tsv: every worker at its namespace's address"

# Sockets: every listener on the namespace's own address; every connection
# from that address to another namespace's.
/usr/bin/python3 - "$work/sockets.txt" "$tag" \
  "$(for h in "${!address[@]}"; do printf '%s=%s,' "$h" "${address[$h]}"; done)" <<'PY' ||
import sys
sockets_file, tag, pairs = sys.argv[1], sys.argv[2], sys.argv[3]
address = dict(p.split("=") for p in pairs.strip(",").split(","))
host_of = {a: h for h, a in address.items()}

def split(endpoint):
    """host, port; an IPv4 address may show v4-mapped."""
    host, port = endpoint.rsplit(":", 1)
    return host.strip("[]").removeprefix("::ffff:"), port

listeners, connections, ns = {}, {}, None
for line in open(sockets_file):
    if line.startswith("== "):
        ns = line[3:].strip()[len(tag) + 1:]
        listeners.setdefault(ns, set())
        connections.setdefault(ns, set())
    elif line.strip():
        state, _, _, local, peer = line.split()[:5]
        if state == "LISTEN":
            listeners[ns].add(split(local))
        else:
            connections[ns].add((split(local), split(peer)))
problems = []
for ns in sorted(listeners):
    own = sorted(port for host, port in listeners[ns] if host == address[ns])
    other = sorted(f"{h}:{p}" for h, p in listeners[ns] if h != address[ns])
    peers = sorted({host_of.get(peer[0], peer[0]) for _, peer in connections[ns]})
    print(f"{ns}: listens on {address[ns]} ports {', '.join(own) or 'none'}, elsewhere "
          f"{other or 'nowhere'}; {len(connections[ns])} connections, with {', '.join(peers)}")
    if not own:
        problems.append(f"{ns}: nothing listens on {address[ns]}")
    if other:
        problems.append(f"{ns}: listeners off its address: {other}")
    for local, peer in sorted(connections[ns]):
        if local[0] != address[ns] or peer[0] not in host_of:
            problems.append(f"{ns}: connection {local} -> {peer} is not between namespaces")
if not any(connections.values()):
    problems.append("no connection seen")
if problems:
    sys.exit("; ".join(problems))
PY
  fail "a service listens or talks off its namespace's address"

reference="$work/reference"
launch_reference "$job" "$reference"
expect_same_outputs "$reference" "$run"
log "PASS: the job ran across $((${#namespaces[@]} - 1)) namespaces"
