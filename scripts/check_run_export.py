"""Checks RUN_DIR/hf against RUN_DIR/policy.safetensors with transformers.

    check_run_export.py RUN_DIR

transformers loads RUN_DIR/hf (eager attention, float32) with no missing,
unexpected or mismatched tensor, and every weight it loaded equals the
run's policy (rounded to the export's stored dtype). Prints the largest
difference; exits 1 when one is not zero.
"""
import json
import os
import sys

import safetensors.torch
import torch
import transformers

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    run = sys.argv[1]
    hf = os.path.join(run, "hf")
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        hf, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(kind):
            raise SystemExit(f"{hf}: {kind} {sorted(info[kind])}")
    with open(os.path.join(hf, "config.json")) as f:
        stored = DTYPES[json.load(f)["dtype"]]
    policy = safetensors.torch.load_file(os.path.join(run, "policy.safetensors"))
    loaded = dict(model.named_parameters())
    worst = 0.0
    for name, trained in policy.items():
        if name not in loaded:
            raise SystemExit(f"{hf}: transformers has no {name}")
        want = trained.to(stored).float()
        worst = max(worst, float((loaded[name].detach() - want).abs().max()))
    print(f"{hf}: {type(model).__name__}, {len(policy)} tensors, largest difference {worst:.3e}")
    if worst != 0.0:
        sys.exit(1)


if __name__ == "__main__":
    main()
