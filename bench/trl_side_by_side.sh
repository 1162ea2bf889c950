#!/usr/bin/env bash
# Seconds per step of one GRPO+LoRA job on a real model, in Trellis and in
# TRL's GRPOTrainer, one after the other on this machine: Trellis runs
# examples/jobs/smollm2_grpo_lora.yaml (SmolLM2-135M-Instruct, 4 prompts x
# 4 responses, LoRA rank 8 on q/k/v/o, 2 threads) for STEPS steps with a
# 4-prompt eval, then bench/trl_grpo.py runs the same job in TRL
# (scripts/trl_venv.sh's environment; the script's header lists what cannot
# match). Prints one table: each side's median seconds per step over the
# steps after the first, their mean, the mean reply length and reward, and
# the ratio TRL / Trellis; then where the seconds go (generation; the
# reference's log-probs and the rewards; the update and the rest); and
# `uptime` before, between and after (bench/README.md).
#   bench/trl_side_by_side.sh [STEPS]   (default 6)
#   TRELLIS_BIN        the trellis binary (default build/trellis)
#   TRELLIS_TRL_VENV   TRL's environment (default .venv/trl)
#   TRELLIS_BENCH_OUT  where the runs go (default: a new folder under /tmp)
#   TRELLIS_TRL_THREADS          TRL's intra-op threads (default 2)
#   TRELLIS_TRL_OMP_WAIT_POLICY  TRL's OMP_WAIT_POLICY (default PASSIVE, as
#                                Trellis sets its own: docs/threads.md;
#                                "default": unset, libgomp's own policy)
# Exits 0 with "skipped: ..." when the model directory is absent or the
# environment cannot be made.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
JOB=examples/jobs/smollm2_grpo_lora.yaml
MODEL=models/smollm2-135m-instruct
DATA=examples/data/smollm2_arith_train.jsonl
BIN=${TRELLIS_BIN:-build/trellis}
if ! [[ "$STEPS" =~ ^[0-9]+$ ]] || [ "$STEPS" -lt 2 ]; then
  echo "usage: bench/trl_side_by_side.sh [STEPS], STEPS an integer >= 2, found '$STEPS'" >&2
  exit 2
fi
if [ ! -f "$MODEL/config.json" ]; then
  echo "skipped: $MODEL is absent (scripts/real_model.sh makes it)"
  exit 0
fi
if [ ! -x "$BIN" ]; then
  echo "skipped: no trellis binary at $BIN (scripts/build.sh trellis, or set TRELLIS_BIN)"
  exit 0
fi
if ! VENV=$(scripts/trl_venv.sh); then
  echo "skipped: TRL's environment could not be made (scripts/trl_venv.sh)"
  exit 0
fi
OUT=${TRELLIS_BENCH_OUT:-$(mktemp -d /tmp/trl_side_by_side.XXXXXX)}
mkdir -p "$OUT"
cat > "$OUT/override.yaml" <<EOF
grpo: {steps: $STEPS}
eval: {num_prompts: 4, batch_size: 4}
EOF
LOAD_BEFORE=$(uptime)
echo "load before: $LOAD_BEFORE"
echo "== Trellis: $BIN run $JOB --override $OUT/override.yaml ($STEPS steps)"
rm -rf "$OUT/trellis"
"$BIN" run "$JOB" --out "$OUT/trellis" --override "$OUT/override.yaml" > "$OUT/trellis.log" 2>&1 ||
  { tail -20 "$OUT/trellis.log"; echo "trellis run failed (log: $OUT/trellis.log)" >&2; exit 1; }
LOAD_MIDDLE=$(uptime)
echo "load between: $LOAD_MIDDLE"
echo "== TRL: bench/trl_grpo.py ($STEPS steps)"
TRL_THREADS=${TRELLIS_TRL_THREADS:-2}
WAIT=(OMP_WAIT_POLICY="${TRELLIS_TRL_OMP_WAIT_POLICY:-PASSIVE}")
[ "${WAIT[0]}" = OMP_WAIT_POLICY=default ] && WAIT=(-u OMP_WAIT_POLICY)
env "${WAIT[@]}" OMP_NUM_THREADS="$TRL_THREADS" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$VENV/bin/python" bench/trl_grpo.py --model "$MODEL" --data "$DATA" --steps "$STEPS" --threads "$TRL_THREADS" --json "$OUT/trl.json" > "$OUT/trl.log" 2>&1 ||
  { tail -20 "$OUT/trl.log"; echo "TRL run failed (log: $OUT/trl.log)" >&2; exit 1; }
LOAD_AFTER=$(uptime)
"$VENV/bin/python" - "$OUT/trellis/ledger.jsonl" "$OUT/trl.json" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in records if r.get("type") == "step"]
machine = next(r for r in records if r.get("type") == "machine")
def trellis_stages(r):
    st = r["stage_seconds"]
    rollout, scored = st["rollout"], st["reference"] + st["verify"] + st["advantage"]
    return {"rollout": rollout, "reference_and_reward": scored,
            "update_and_rest": r["step_seconds"] - rollout - scored}
trellis = {
    "seconds": [r["step_seconds"] for r in steps],
    "stages": [trellis_stages(r) for r in steps],
    "reward": [r["mean_reward"] for r in steps],
    "length": [r["generated_tokens"] / max(1, r["samples_generated"]) for r in steps],
}
t = json.load(open(sys.argv[2]))
trl = {"seconds": t["step_seconds"], "stages": t["stage_seconds"], "reward": t["reward"], "length": t["completion_length"]}
def row(name, d):
    later = d["seconds"][1:]
    return (name, len(d["seconds"]), d["seconds"][0], statistics.median(later), statistics.mean(later),
            statistics.mean(d["length"]), statistics.mean(d["reward"]))
rows = [row("Trellis", trellis), row(f"TRL {t['versions']['trl']}", trl)]
print()
print("| side | steps | first step (s) | median s/step, later steps | mean s/step, later steps | "
      "mean reply tokens | mean reward |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.1f} | {r[6]:.3f} |")
print(f"| ratio TRL / Trellis | | {rows[1][2] / rows[0][2]:.2f} | {rows[1][3] / rows[0][3]:.2f} | "
      f"{rows[1][4] / rows[0][4]:.2f} | | |")
print("\n| median s, later steps | rollout | reference + reward | update + rest |")
print("|---|---|---|---|")
for name, d in [("Trellis", trellis), ("TRL", trl)]:
    cells = [statistics.median(s[k] for s in d["stages"][1:])
             for k in ("rollout", "reference_and_reward", "update_and_rest")]
    print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
print("\nper step (s): Trellis " + " ".join(f"{s:.2f}" for s in trellis["seconds"]))
print("per step (s): TRL     " + " ".join(f"{s:.2f}" for s in trl["seconds"]))
print("versions: " + ", ".join(f"{k} {v}" for k, v in t["versions"].items()))
print(f"threads: Trellis intra-op {machine['intra_op_threads']} of {machine['threads_given']} given "
      f"(its probe), OMP_WAIT_POLICY=PASSIVE; TRL intra-op {t['threads']}, "
      f"OMP_WAIT_POLICY={t['omp_wait_policy']}")
PY
echo "load before:  $LOAD_BEFORE"
echo "load between: $LOAD_MIDDLE"
echo "load after:   $LOAD_AFTER"
echo "runs: $OUT"
