#!/usr/bin/env python3
"""Loads Trellis's exports with transformers and peft and compares logits.

    check_hf_export.py OUT_DIR

Run through scripts/check_hf_export.sh, which makes OUT_DIR with
model/testing/hf_export_writer: one folder per case, each with
trellis.safetensors (a batch, input_ids, attention_mask and position_ids,
and Trellis's logits on it), model/ (ExportHfModel's directory) and, for
LoRA cases, adapter/ (ExportPeftAdapters' directory over the base that its
adapter_config.json names).

For each case, AutoModelForCausalLM.from_pretrained(model/) must load every
tensor (none missing or unexpected), as the class config.json names, with
the stored dtype config.json names; PeftModel.from_pretrained(base,
adapter/) must load the adapters; and both must compute Trellis's logits
within TOLERANCE at every non-padding position. Prints the largest
difference of each and exits 1 when one is over.
"""
import json
import os
import sys

import peft
import safetensors
import safetensors.torch
import torch
import transformers

TOLERANCE = 1e-4
SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def load(path):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(kind):
            raise SystemExit(f"{path}: {kind} {sorted(info[kind])}")
    return model.eval()


def check_stored(path):
    """The class and the stored dtype are those config.json names."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    want = SAFETENSORS_DTYPES[config["dtype"]]
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    for file in files:
        with safetensors.safe_open(os.path.join(path, file), "pt") as stored:
            for name in stored.keys():
                got = stored.get_slice(name).get_dtype()
                if got != want:
                    raise SystemExit(f"{path}/{file}: {name} is {got}, config.json says {want}")
    return config["architectures"][0], config["dtype"], len(files)


def max_difference(model, batch):
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    valid = batch["attention_mask"].bool().unsqueeze(-1)
    return float(((logits.float() - batch["logits"]).abs() * valid).max())


def check_case(case_dir):
    """(what, largest difference) for the case's export and adapters."""
    batch = safetensors.torch.load_file(os.path.join(case_dir, "trellis.safetensors"))
    model_dir = os.path.join(case_dir, "model")
    architecture, dtype, files = check_stored(model_dir)
    model = load(model_dir)
    if type(model).__name__ != architecture:
        raise SystemExit(f"{model_dir}: loaded as {type(model).__name__}, not {architecture}")
    results = [(f"transformers {architecture} {dtype}, {files} file(s)",
                max_difference(model, batch))]
    adapter_dir = os.path.join(case_dir, "adapter")
    if os.path.isdir(adapter_dir):
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            adapter = json.load(f)
        base = load(adapter["base_model_name_or_path"])
        lora = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
        targets = ",".join(sorted(adapter["target_modules"]))
        results.append((f"peft r={adapter['r']} alpha={adapter['lora_alpha']:g} on {targets}",
                        max_difference(lora, batch)))
    return results


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    out = sys.argv[1]
    worst = 0.0
    for case in sorted(os.listdir(out)):
        for what, difference in check_case(os.path.join(out, case)):
            worst = max(worst, difference)
            print(f"{case:16s} {what:58s} max |diff| {difference:.3e}")
    print(f"largest difference {worst:.3e}, tolerance {TOLERANCE:g}")
    if worst > TOLERANCE:
        sys.exit(1)


if __name__ == "__main__":
    main()
