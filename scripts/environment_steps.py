#!/usr/bin/env python3
"""Prints a multi-turn run's learning curve from RUN/ledger.jsonl.

Usage: environment_steps.py RUN_DIR [--every N]

One line per N training steps (default 10, and the last): the step's
accuracy (share of episodes with a positive reward) and mean reward, and
from its "environment" record (ledger/README.md) turns per episode, tool
calls per episode for python_tool ("-" for other environments: turns
minus the episodes that ended done, since each of those took one
answering turn and python_tool's other turns are tool calls) and how the
episodes ended; then the held-out evaluations ("eval" records).
docs/environment-demos.md reads its output.
"""

import argparse
import json
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--every", type=int, default=10)
    args = p.parse_args()
    path = os.path.join(args.run_dir, "ledger.jsonl")
    env, steps, evals = {}, [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "environment":
                env[r["step"]] = r
            elif r.get("type") == "step":
                steps.append(r)
            elif r.get("type") == "eval":
                evals.append(r)
    if not env:
        sys.exit(f"{path}: no environment records (a job without environment.name?)")
    print(f"{'step':>5} {'accuracy':>8} {'reward':>7} {'turns':>6} {'tools':>6}  ended_by")
    for i, s in enumerate(steps):
        if i % args.every and i != len(steps) - 1:
            continue
        e = env.get(s["step"])
        if e is None:
            continue
        episodes = max(e["episodes"], 1)
        done = e.get("ended_by", {}).get("done", 0)
        ended = ", ".join(f"{k} {v / episodes:.2f}" for k, v in sorted(e.get("ended_by", {}).items()))
        tools = (f"{e['turns_mean'] - done / episodes:.2f}"
                 if e["environment"].split("@")[0] == "python_tool" else "-")
        print(f"{s['step']:>5} {s['accuracy']:>8.3f} {s['mean_reward']:>7.3f} "
              f"{e['turns_mean']:>6.2f} {tools:>6}  {ended}")
    for r in evals:
        print(f"eval {r['label']}: accuracy {r['accuracy']:.3f} over {r['prompts']} prompts")


if __name__ == "__main__":
    main()
