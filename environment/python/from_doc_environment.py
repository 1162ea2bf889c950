#!/usr/bin/env python3
"""An environment written from docs/environment-protocol.md alone, in plain
Python with the standard library (not the SDK): the JSON-lines form that the
"subprocess" built-in runs. environment/conformance_test.cc runs the
conformance suite over it.

The game: find a secret in 0..15 drawn from the episode's seed. Open says
"0-15?"; each action's last number is a guess, answered ">" (higher), "<"
(lower) or "=" (found: reward 1, done).
"""
import json
import re
import sys

LOW, HIGH = 0, 15
episodes = {}  # episode_id -> {"secret": int, "done": bool}


def handle(request):
    verb = request["verb"]
    episode_id = request["episode_id"]
    if verb == "open":
        episodes[episode_id] = {"secret": LOW + request["seed"] % (HIGH - LOW + 1), "done": False}
        return {"observation": f"{LOW}-{HIGH}?", "tools": []}
    if verb == "close":
        episodes.pop(episode_id, None)
        return {}
    if verb != "step":
        return {"error": f"unknown verb {verb!r}"}
    episode = episodes.get(episode_id)
    if episode is None:
        return {"error": f"unknown episode {episode_id}"}
    if episode["done"]:
        return {"error": f"episode {episode_id} is done"}
    numbers = re.findall(r"-?\d+", request["action"])
    if not numbers:
        return {"observation": "?", "reward": 0, "done": False}
    guess = int(numbers[-1])
    if guess < episode["secret"]:
        return {"observation": ">", "reward": 0, "done": False}
    if guess > episode["secret"]:
        return {"observation": "<", "reward": 0, "done": False}
    episode["done"] = True
    return {"observation": "=", "reward": 1, "done": True}


def main():
    for line in sys.stdin:
        request = json.loads(line)
        answer = handle(request)
        answer["id"] = request["id"]
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
