#!/usr/bin/env bash
# The rollout stage as a launched job's actor pool grows. One job, launched
# twice: with a fixed pool of one actor, and with a second actor joining
# after step 4 (`trellis serve actor --scheduler ADDR`). Sampling is keyed
# by the sample, so both runs draw the same tokens at every step, and the
# steps' rollout seconds compare step for step: before the join (one actor
# each) and after it (one against two). Each actor decodes on one thread;
# the model is large enough that decoding, not the calls, fills the rollout.
#   bench/elastic_bench.sh [TRELLIS_BINARY] [OUT]   (defaults: build/trellis, /tmp/elastic_bench)
set -euo pipefail
trellis=$(realpath "${1:-build/trellis}")
out=${2:-/tmp/elastic_bench}
rm -rf "$out"
mkdir -p "$out"
cat >"$out/job.yaml" <<'YAML'
name: elastic-bench
model: {d_model: 512, n_layers: 6, n_heads: 8, n_kv_heads: 4, d_ff: 1536, max_seq_len: 96}
data:
  arithmetic: {min_digits: 1, max_digits: 2, operators: "+", num_problems: 400}
sampling: {max_new_tokens: 48}
sft: {steps: 2, batch_size: 16}
grpo: {steps: 12, prompts_per_step: 32, responses_per_prompt: 4, micro_batch_size: 32}
eval: {num_prompts: 4}
runtime: {num_threads: 1, seed: 3}
deployment:
  actor: {count: 1}
  weight_transport: grpc
YAML
steps() {
  local n
  n=$(grep -c '"type":"step"' "$1/ledger.jsonl" 2>/dev/null || true)
  echo "${n:-0}"
}
"$trellis" launch "$out/job.yaml" --out "$out/fixed" >"$out/fixed.log" 2>&1
"$trellis" launch "$out/job.yaml" --out "$out/joined" >"$out/joined.log" 2>&1 &
launcher=$!
until [ "$(steps "$out/joined")" -ge 4 ]; do
  kill -0 "$launcher" 2>/dev/null || { cat "$out/joined.log"; exit 1; }
  sleep 0.2
done
"$trellis" serve actor --scheduler "$(cat "$out/joined/launch/scheduler.addr")" \
  --secret-file "$out/joined/launch/secret" >"$out/joiner.log" 2>&1 &
joiner=$!
wait "$launcher"
wait "$joiner"
python3 - "$out/fixed/ledger.jsonl" "$out/joined/ledger.jsonl" <<'PY'
import json, sys
def steps(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "step" and r.get("rollout_actors"):
            out[r["step"]] = r
    return out
fixed, joined = steps(sys.argv[1]), steps(sys.argv[2])
print("step  actors  tokens(fixed/joined)  rollout s: fixed  joined")
for s in sorted(joined):
    f, j = fixed[s], joined[s]
    print(f"{s:4d}  {j['rollout_actors']:6d}  {f['generated_tokens']:6d}/{j['generated_tokens']:<6d}"
          f"        {f['stage_seconds']['rollout']:8.3f} {j['stage_seconds']['rollout']:7.3f}")
for actors in sorted({r["rollout_actors"] for r in joined.values()}):
    same = [s for s in joined if joined[s]["rollout_actors"] == actors]
    a = sum(fixed[s]["stage_seconds"]["rollout"] for s in same)
    b = sum(joined[s]["stage_seconds"]["rollout"] for s in same)
    print(f"steps the joined run rolled out with {actors} actor(s): {len(same)}; rollout seconds "
          f"fixed pool of 1: {a:.3f}, joined run: {b:.3f} ({b / a:.2f}x)")
PY
