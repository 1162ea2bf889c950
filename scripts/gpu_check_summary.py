#!/usr/bin/env python3
"""One line for scripts/gpu_check.sh's table from a run's summary.json:
held-out accuracy before and after, and the largest share of any role's
memory peak that the ledger could not attribute (ledger/README.md): its
device peaks (memory.device) when it measured a GPU."""
import json
import sys


def main(run_dir):
    with open(f"{run_dir}/summary.json") as f:
        summary = json.load(f)
    evals = summary.get("eval", {})
    before = evals.get("before", {}).get("accuracy")
    after = evals.get("after", {}).get("accuracy")
    memory = summary.get("memory", {})
    # On a GPU the device's peaks are the ones the objects explain (the CPU's
    # count host memory only); each device's role peaks, else the CPU's.
    devices = memory.get("device", {})
    peaks = [p for d in devices.values() for p in d.get("role_peaks", {}).values()]
    if not peaks:
        peaks = list(memory.get("role_peaks", {}).values())
    worst = max((abs(p.get("unattributed_fraction", 0.0)) for p in peaks), default=None)
    parts = []
    if before is not None and after is not None:
        parts.append(f"held-out {before:.3f} -> {after:.3f}")
    if worst is not None:
        parts.append(f"unattributed at most {100 * worst:.1f}% of a role's peak")
    print(", ".join(parts) or "no eval or memory in summary.json")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_check_summary.py RUN_DIR")
    main(sys.argv[1])
