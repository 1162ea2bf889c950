#!/usr/bin/env python3
"""A Trellis subprocess verifier plugin (docs/verifier-plugins.md).

Reads one JSON request per line on stdin, writes one JSON result per line on
stdout. Run it with:

  trellis verify --verifier subprocess \
      --config command=python3 --config command=examples/verifiers/exact_plugin.py \
      data.jsonl
"""
import json
import sys


def score(prompt, response, answer):
    """Reward 1 when the trimmed response equals the trimmed answer."""
    ok = response.strip() == answer.strip()
    return (1.0 if ok else 0.0), ("correct" if ok else "wrong")


for line in sys.stdin:
    request = json.loads(line)
    try:
        reward, verdict = score(request["prompt"], request["response"], request["answer"])
        result = {"reward": reward, "verdict": verdict, "detail": ""}
    except Exception as e:  # one bad item must not kill the plugin
        result = {"reward": 0.0, "verdict": "error", "detail": repr(e)}
    result["id"] = request.get("id")  # echo it: keeps answers in step
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
