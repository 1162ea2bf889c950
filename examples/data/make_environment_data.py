#!/usr/bin/env python3
"""Writes the data of the multi-turn demos (docs/environment-demos.md).

Run from the repository root; the output is committed and the same
arguments give the same files:

    python3 examples/data/make_environment_data.py examples/data

tool_arith_{train,eval}.jsonl (examples/jobs/tool_arithmetic.yaml): 3-digit
multiplications "806*573=", operands from 317 up so that every product has
6 digits (the warm-up's copies, of the operands into the code and of the
tool's output into the answer, are then at fixed distances). Not
additions: the policy learns 5-digit addition unaided (73% held out after
the warm-up), so only a task it cannot learn shows the tool's worth. A
training line's "answer" is a worked solution, the SFT warm-up's target,
ending in \\boxed{product}: the python_tool environment's answer verifier
("math") takes the last \\boxed{} of the ground truth as the answer, so one
line serves both the warm-up and the environment. A share of the
solutions (--tool-fraction) calls the tool:

    <py>print(806*573,end='')</py>;461838\\boxed{461838};

(the turn "<py>...</py>;" runs the code, its output "461838" is the
observation, the final turn "\\boxed{461838};" answers); the others answer
at once, "\\boxed{461838};", which the policy rarely gets right. The tool's
output has no newline: the character tokenizer has none. Held-out lines'
answers are the plain product.

tool_arith_direct_train.jsonl (examples/jobs/tool_arithmetic_baseline.yaml):
the same training problems, every solution answering at once.

guess_{train,eval}.jsonl (examples/jobs/guess_number.yaml): prompt "Guess:";
the guess_number environment draws each episode's secret from its seed and
opens with "1-10?". A training line's answer is a game as the warm-up's
target: guesses "7." answered ">" (higher), "<" (lower) or "=" (found), up
to 4 guesses. --informed-fraction of the games guess among the numbers the
answers so far allow; the others guess 4 distinct numbers blind (which
finds the secret 40% of the time), so the warm-up teaches the format and
RL has to learn to use the answers.
"""

import argparse
import json
import os
import random

TURN_STOP = ";"
# 317 * 317 = 100489: every product has 6 digits.
MIN_OPERAND = 317
GUESS_STOP = "."


def tool_solution(a, b):
    product = a * b
    return f"<py>print({a}*{b},end='')</py>{TURN_STOP}{product}\\boxed{{{product}}}{TURN_STOP}"


def direct_solution(a, b):
    return f"\\boxed{{{a * b}}}{TURN_STOP}"


def products(rng, count):
    seen = set()
    while len(seen) < count:
        seen.add((rng.randint(MIN_OPERAND, 999), rng.randint(MIN_OPERAND, 999)))
    problems = sorted(seen)
    rng.shuffle(problems)
    return problems


def guess_game(rng, low, high, max_turns, informed):
    secret = rng.randint(low, high)
    allowed = list(range(low, high + 1))
    blind = rng.sample(allowed, max_turns)
    text = f"{low}-{high}?"
    for turn in range(max_turns):
        guess = rng.choice(allowed) if informed else blind[turn]
        text += f"{guess}{GUESS_STOP}"
        if guess == secret:
            return text + "="
        text += ">" if guess < secret else "<"
        allowed = [n for n in allowed if (n > guess) == (guess < secret) and n != guess]
    return text


def write(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {path}: {len(rows)} lines")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train", type=int, default=6000)
    p.add_argument("--eval", type=int, default=400)
    p.add_argument("--tool-fraction", type=float, default=0.3)
    p.add_argument("--guess-train", type=int, default=1000)
    p.add_argument("--guess-eval", type=int, default=200)
    p.add_argument("--informed-fraction", type=float, default=0.0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    out = lambda name: os.path.join(args.out_dir, name)

    problems = products(rng, args.train + args.eval)
    held_out, train = problems[: args.eval], problems[args.eval :]
    prompt = lambda a, b: f"{a}*{b}="
    write(out("tool_arith_train.jsonl"),
          [{"prompt": prompt(a, b),
            "answer": tool_solution(a, b) if rng.random() < args.tool_fraction
            else direct_solution(a, b)} for a, b in train])
    write(out("tool_arith_direct_train.jsonl"),
          [{"prompt": prompt(a, b), "answer": direct_solution(a, b)} for a, b in train])
    write(out("tool_arith_eval.jsonl"),
          [{"prompt": prompt(a, b), "answer": str(a * b)} for a, b in held_out])

    game = lambda: guess_game(rng, 1, 10, 4, rng.random() < args.informed_fraction)
    write(out("guess_train.jsonl"),
          [{"prompt": "Guess:", "answer": game()} for _ in range(args.guess_train)])
    write(out("guess_eval.jsonl"),
          [{"prompt": "Guess:", "answer": ""} for _ in range(args.guess_eval)])


if __name__ == "__main__":
    main()
