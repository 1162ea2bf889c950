#!/usr/bin/env python3
"""guess_number as a plugin written with the SDK (verifier/python,
trellis_verifier.environment): find a secret in [low, high] drawn from the
seed; answers ">" (higher), "<" (lower), "=" (found: reward 1, done).

    environment:
      name: subprocess
      command: ["python3", "examples/environments/guess_plugin.py"]
      turn_stop: "."

Needs verifier/python on PYTHONPATH and the generated stubs
(TRELLIS_PYTHON_STUBS, as the SDK does).
"""
import pathlib
import random
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "verifier" / "python"))
from trellis_verifier.environment import Environment, StepResult  # noqa: E402

LOW, HIGH = 1, 100


class GuessNumber(Environment):
    def __init__(self):
        self.secrets = {}

    def open(self, episode_id, prompt, answer, metadata, seed):
        self.secrets[episode_id] = random.Random(seed).randint(LOW, HIGH)
        return f"{LOW}-{HIGH}?"

    def step(self, episode_id, action, turn):
        secret = self.secrets[episode_id]
        numbers = re.findall(r"-?\d+", action)
        if not numbers:
            return StepResult(observation="?")
        guess = int(numbers[-1])
        if guess == secret:
            return StepResult(observation="=", reward=1.0, done=True)
        return StepResult(observation=">" if guess < secret else "<")

    def close(self, episode_id):
        self.secrets.pop(episode_id, None)


if __name__ == "__main__":
    GuessNumber().serve()
