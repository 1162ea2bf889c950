#!/usr/bin/python3
"""Tests of the SDK's Environment base class (trellis_verifier.environment)
and of examples/environments/guess_plugin.py, which uses it.

Run by ctest (environment_python_sdk_test) with /usr/bin/python3 and
TRELLIS_PYTHON_STUBS=BUILD_DIR/python.
"""
import io
import json
import math
import pathlib
import subprocess
import sys
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "verifier" / "python"))
from trellis_verifier.environment import (Environment, Observation, StepResult,  # noqa: E402
                                          Tool)


class Counter(Environment):
    """Done on the third action; reward = turn; "boom" raises; "nan" gives NaN."""

    def __init__(self):
        self.open_episodes = {}

    def open(self, episode_id, prompt, answer, metadata, seed):
        self.open_episodes[episode_id] = seed
        return Observation(f"seed {seed} {metadata.get('k', '')}", [Tool("count", "counts")])

    def step(self, episode_id, action, turn):
        if action == "boom":
            raise RuntimeError("boom")
        if action == "nan":
            return StepResult(reward=math.nan)
        return StepResult(observation=f"#{turn}", reward=turn, done=turn == 2,
                          metadata={"action": action})

    def close(self, episode_id):
        del self.open_episodes[episode_id]


class EnvironmentBaseTest(unittest.TestCase):
    def test_open_step_close_answers_echo_the_id(self):
        env = Counter()
        opened = env.handle({"id": 1, "verb": "open", "episode_id": "e", "prompt": "p",
                             "answer": "", "seed": 5, "metadata": {"k": "v"}})
        self.assertEqual(opened, {"id": 1, "observation": "seed 5 v",
                                  "tools": [{"name": "count", "description": "counts"}]})
        stepped = env.handle({"id": 2, "verb": "step", "episode_id": "e", "action": "a",
                              "turn": 2})
        self.assertEqual(stepped, {"id": 2, "observation": "#2", "reward": 2.0, "done": True,
                                   "metadata": {"action": "a"}})
        self.assertEqual(env.handle({"id": 3, "verb": "close", "episode_id": "e"}), {"id": 3})
        self.assertEqual(env.open_episodes, {})

    def test_an_exception_or_a_nan_reward_fails_only_the_call(self):
        env = Counter()
        env.handle({"id": 1, "verb": "open", "episode_id": "e", "seed": 0})
        boom = env.handle({"id": 2, "verb": "step", "episode_id": "e", "action": "boom"})
        self.assertEqual(boom, {"id": 2, "error": "RuntimeError: boom"})
        nan = env.handle({"id": 3, "verb": "step", "episode_id": "e", "action": "nan"})
        self.assertIn("reward must be finite", nan["error"])
        unknown = env.handle({"id": 4, "verb": "jump", "episode_id": "e"})
        self.assertIn("unknown verb 'jump'", unknown["error"])

    def test_serve_writes_one_line_per_request(self):
        requests = [{"id": 1, "verb": "open", "episode_id": "e", "seed": 1},
                    {"id": 2, "verb": "step", "episode_id": "e", "action": "x", "turn": 0}]
        stdin = io.StringIO("".join(json.dumps(r) + "\n" for r in requests) + "not json\n")
        stdout = io.StringIO()
        Counter().serve(stdin, stdout)
        lines = stdout.getvalue().splitlines()
        self.assertEqual(len(lines), 3)
        self.assertEqual(json.loads(lines[1])["observation"], "#0")
        self.assertIn("request is not JSON", json.loads(lines[2])["error"])


class GuessPluginTest(unittest.TestCase):
    def test_binary_search_finds_the_secret(self):
        plugin = subprocess.Popen(
            [sys.executable, str(REPO / "examples" / "environments" / "guess_plugin.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        next_id = 0

        def call(**request):
            nonlocal next_id
            next_id += 1
            request["id"] = next_id
            plugin.stdin.write(json.dumps(request) + "\n")
            plugin.stdin.flush()
            answer = json.loads(plugin.stdout.readline())
            self.assertEqual(answer.get("id"), next_id)
            return answer

        try:
            opened = call(verb="open", episode_id="g", prompt="", answer="", seed=9)
            low, high = (int(x) for x in opened["observation"].rstrip("?").split("-"))
            for turn in range(10):
                guess = (low + high) // 2
                r = call(verb="step", episode_id="g", action=f"I guess {guess}.", turn=turn)
                if r["done"]:
                    break
                low, high = (guess + 1, high) if r["observation"] == ">" else (low, guess - 1)
            self.assertEqual((r["observation"], r["reward"], r["done"]), ("=", 1.0, True))
            self.assertEqual(call(verb="close", episode_id="g"), {"id": next_id})
        finally:
            plugin.stdin.close()
            self.assertEqual(plugin.wait(timeout=30), 0)
            plugin.stdout.close()


if __name__ == "__main__":
    unittest.main()
