#!/usr/bin/python3
"""The default arithmetic job's `numeric` check, as a Python verifier service.

Written with the SDK (verifier/python/trellis_verifier, protocol:
docs/verifier-protocol.md). Run it as its own process:

  scripts/build.sh trellis_python_stubs          # the protoc-generated stubs
  TRELLIS_PYTHON_STUBS=build/python /usr/bin/python3 \\
      examples/verifiers/python_numeric.py --port 50051
  # prints: trellis_verifier: serving numeric-py@1 on 127.0.0.1:50051

and point a job at it:

  verifier: {name: remote, address: "127.0.0.1:50051"}

Rewards and verdicts match the built-in `numeric` verifier with its defaults
(tolerance 0, reward 1 for correct, 0 otherwise).
"""
import math
import pathlib
import re
import sys

# Run from a checkout without installing the SDK.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "verifier" / "python"))
import trellis_verifier  # noqa: E402

# The first "-?\d+(\.\d+)?" of the response, as the built-in reads it.
NUMBER = re.compile(r"-?\d+(?:\.\d+)?", re.ASCII)


@trellis_verifier.verifier(name="numeric-py", version="1")
def score(prompt, response, answer):
    try:
        want = float(answer.strip())
    except ValueError:
        want = math.nan
    if not math.isfinite(want):
        return 0.0, "error", f"answer {answer!r} is not a number"
    found = NUMBER.search(response)
    if found is None:
        return 0.0, "unparseable", f"no number in the response; expected {answer.strip()}"
    got = float(found.group())
    detail = f"parsed {found.group()!r}, expected {answer.strip()}"
    if got == want:
        return 1.0, "correct", detail
    return 0.0, "wrong", detail


if __name__ == "__main__":
    trellis_verifier.run(score)
