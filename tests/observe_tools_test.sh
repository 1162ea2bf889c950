#!/usr/bin/env bash
# A run's metrics read back by the real tools (docs/observe.md), from the
# virtual environment of scripts/observe_venv.sh, made here when missing:
#   1. the built-in default job, shortened, logging to an MLflow tracking
#      server this script starts on 127.0.0.1 (sqlite store): TensorBoard's
#      EventAccumulator finds every step's scalars in RUN/tensorboard/, and
#      MLflow's client finds the run FINISHED with the job's parameters and
#      every step's metrics;
#   2. the same job with observe.mlflow.uri on a closed port of 127.0.0.1
#      completes, with exactly one line about it.
# Exits 77 (ctest's skip) saying why when the environment cannot be made
# (no network, no pip).
#   tests/observe_tools_test.sh TRELLIS_BINARY
set -uo pipefail
readonly SKIPPED=77
trellis=$(realpath "$1")
cd "$(dirname "$0")/.." || exit 1
source scripts/observe_venv.sh
tmp=$(mktemp -d)
server=
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! observe_venv_ensure >"$tmp/venv.log" 2>&1; then
  echo "SKIPPED: cannot make the virtual environment $OBSERVE_VENV with ${OBSERVE_PINNED[*]}:"
  tail -n 3 "$tmp/venv.log"
  exit $SKIPPED
fi
python=$OBSERVE_VENV/bin/python
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The default job, a few small steps.
cat >"$tmp/short.yaml" <<'YAML'
sft: {steps: 4, batch_size: 16}
grpo: {steps: 3, prompts_per_step: 4, responses_per_prompt: 4}
eval: {num_prompts: 8}
YAML

# 1. TensorBoard and a live MLflow server.
port=$(free_port)
mkdir -p "$tmp/mlflow"
"$python" tests/python/check_observe.py serve "$port" "$tmp/mlflow" >"$tmp/serve.out" &
server=$!
for _ in $(seq 240); do
  grep -q ready "$tmp/serve.out" && break
  kill -0 "$server" 2>/dev/null || fail "mlflow server: $(cat "$tmp/mlflow/server.log")"
  sleep 0.5
done
grep -q ready "$tmp/serve.out" || fail "mlflow server did not start: $(cat "$tmp/mlflow/server.log")"
{ cat "$tmp/short.yaml"; echo "observe: {mlflow: {uri: \"http://127.0.0.1:$port\", experiment: observe-test}}"; } \
  >"$tmp/live.yaml"
"$trellis" run --out "$tmp/live" --override "$tmp/live.yaml" >"$tmp/live.log" 2>&1 ||
  fail "trellis run with a live server: $(tail -n 20 "$tmp/live.log")"
! grep -q mlflow "$tmp/live.log" || fail "a live server, yet: $(grep mlflow "$tmp/live.log")"
"$python" tests/python/check_observe.py tensorboard "$tmp/live" || exit 1
"$python" tests/python/check_observe.py mlflow "http://127.0.0.1:$port" observe-test "$tmp/live" ||
  exit 1

# 2. A closed port: the run completes, with one line saying so.
closed=$(free_port)
{ cat "$tmp/short.yaml"; echo "observe: {mlflow: {uri: \"http://127.0.0.1:$closed\"}}"; } \
  >"$tmp/down.yaml"
"$trellis" run --out "$tmp/down" --override "$tmp/down.yaml" >"$tmp/down.log" 2>&1 ||
  fail "trellis run with the server down: $(tail -n 20 "$tmp/down.log")"
lines=$(grep -c mlflow "$tmp/down.log")
[[ "$lines" == 1 ]] || fail "expected one line about mlflow, found $lines: $(grep mlflow "$tmp/down.log")"
grep mlflow "$tmp/down.log" | grep -q "127.0.0.1:$closed" || fail "the line does not name the server"
[[ -f "$tmp/down/summary.json" ]] || fail "the run with the server down wrote no summary.json"
echo "server down: $(grep mlflow "$tmp/down.log")"
echo PASSED
