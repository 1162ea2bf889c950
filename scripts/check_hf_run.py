#!/usr/bin/env python3
"""Loads what a job with model.path wrote, with transformers and peft.

    check_hf_run.py RUN_DIR EVAL_JSONL [N]

RUN_DIR/hf: AutoModelForCausalLM and AutoTokenizer load it; greedy
`generate` (6 new tokens) answers the first N (default 100) chats of
EVAL_JSONL ({"messages": [...], "answer": ...} lines), rendered with
apply_chat_template; prints the fraction answered exactly.
RUN_DIR/hf_adapter (LoRA jobs): peft's PeftModel loads it over the base its
adapter_config.json names; prints the largest logit difference from
RUN_DIR/hf (the merged policy) on a fixed batch.
"""
import json
import os
import sys

import torch
import transformers


def main(run_dir, eval_path, n):
    hf = os.path.join(run_dir, "hf")
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    print(f"{hf}: {type(model).__name__}, {model.dtype}")
    with open(eval_path) as f:
        examples = [json.loads(line) for line in f][:n]
    right = 0
    for ex in examples:
        ids = tok.apply_chat_template(ex["messages"], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=6, do_sample=False)
        text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        right += text.strip() == str(ex["answer"])
    print(f"greedy exact answers on the first {len(examples)} chats: {right / len(examples):.2f}")

    adapter = os.path.join(run_dir, "hf_adapter")
    if not os.path.isdir(adapter):
        return
    import peft
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        base_dir = json.load(f)["base_model_name_or_path"]
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    adapted = peft.PeftModel.from_pretrained(base, adapter).eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    batch = torch.tensor([[1, 40, 41, 42, 43, 44, 2, 10]])
    with torch.no_grad():
        a, b = adapted(batch).logits, merged(batch).logits
    print(f"{adapter} over {base_dir}: largest logit difference from the merged policy "
          f"{(a - b).abs().max().item():.3g} (logits up to {b.abs().max().item():.3g})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 100)
