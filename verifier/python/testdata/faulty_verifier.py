#!/usr/bin/python3
"""A verifier served with the SDK whose scoring misbehaves on purpose.

  faulty_verifier.py raise|nan|slow [--port N]
raise: ValueError on responses other than "ok"; nan: NaN reward for them;
slow: sleeps 30 s on them. The response "ok" always scores 1.0 CORRECT.
"""
import math
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import trellis_verifier  # noqa: E402

MODE = sys.argv[1]


def score(prompt, response, answer):
    if response == "ok":
        return 1.0, "correct", "ok"
    if MODE == "raise":
        raise ValueError(f"cannot score {response!r}")
    if MODE == "nan":
        return math.nan
    if MODE == "slow":
        time.sleep(30)
        return 0.0
    raise SystemExit(f"unknown mode {MODE}")


if __name__ == "__main__":
    trellis_verifier.run(score, name=f"faulty-{MODE}", version="0", argv=sys.argv[2:])
