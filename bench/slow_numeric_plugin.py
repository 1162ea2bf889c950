#!/usr/bin/env python3
"""async_bench's verifier for launched runs: a subprocess plugin
(docs/verifier-plugins.md) that sleeps SLEEP_MS (its first argument) per
item, then scores like the built-in numeric verifier (the first number of
the response equals the answer)."""
import json
import re
import sys
import time

SLEEP_S = float(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 0.0
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

for line in sys.stdin:
    request = json.loads(line)
    time.sleep(SLEEP_S)
    found = NUMBER.search(request["response"])
    if found is None:
        result = {"reward": 0.0, "verdict": "unparseable", "detail": ""}
    else:
        ok = abs(float(found.group()) - float(request["answer"])) < 1e-9
        result = {"reward": 1.0 if ok else 0.0, "verdict": "correct" if ok else "wrong",
                  "detail": ""}
    result["id"] = request.get("id")
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
