#!/usr/bin/env python3
"""Writes the long-tail benchmark's data (examples/jobs/long_tail_grpo.yaml,
docs/async.md): sums of two numbers below 100, as the built-in arithmetic
task asks them. A tenth of the training prompts carry "min_new_tokens": 30,
so their responses run ten times as long as the others' (about 3 tokens);
the held-out prompts carry none.

    python3 examples/data/make_long_tail_data.py   # rewrites the two files
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = 30


def main():
    rng = random.Random(7)
    problems = [(a, b) for a in range(100) for b in range(100)]
    rng.shuffle(problems)
    held_out, train = problems[:500], problems[500:4500]
    with open(os.path.join(HERE, "long_tail_train.jsonl"), "w") as f:
        for i, (a, b) in enumerate(train):
            line = {"prompt": f"{a}+{b}=", "answer": str(a + b)}
            if i % 10 == 0:
                line["min_new_tokens"] = LONG
            f.write(json.dumps(line) + "\n")
    with open(os.path.join(HERE, "long_tail_eval.jsonl"), "w") as f:
        for a, b in held_out:
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")


if __name__ == "__main__":
    main()
