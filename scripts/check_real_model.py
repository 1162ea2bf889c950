"""Checks a directory made by scripts/real_model.sh with transformers
(scripts/check_real_model.sh runs it):

- the directory loads (no tensor missing or unexpected) and its tokenizer
  and chat template render a question;
- the query/key un-permutation of scripts/gguf_to_hf.py is right: the
  model's loss on a sentence is lower than with the rows left as llama.cpp
  stores them (the same reordering of a head's query and key rows leaves
  their product alone, so only the rotary pairing tells them apart: a
  margin of about 0.25 nats on SmolLM2);
- it writes DIR/reference.safetensors, what transformers computes, for
  tests/real_model_test.cc to compare Trellis with: the rendered question's
  ids (prompt_ids), the logits over it and 24 greedily generated tokens.

  python check_real_model.py MODEL_DIR
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTION = [{"role": "user", "content": "What is 17+25? Answer with the number."}]
SENTENCE = "The capital of France is Paris. It is known for the Eiffel Tower and its museums."
NEW_TOKENS = 24


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def loss(model, ids):
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


def main():
    directory = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(directory)
    model, info = AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"check_real_model: loading {directory}: {bad}")
    model.eval()
    encoded = tok.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)
    prompt = encoded["input_ids"]
    with torch.no_grad():
        logits = model(prompt).logits
        # The mask is given: without it generate takes the prompt's
        # <|im_end|> (the pad id too) for padding.
        out = model.generate(**encoded, max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    generated = out[:, prompt.shape[1]:]
    print("prompt:", repr(tok.decode(prompt[0])))
    print("greedy reply:", repr(tok.decode(generated[0], skip_special_tokens=False)))
    ids = tok(SENTENCE, return_tensors="pt")["input_ids"]
    right = loss(model, ids)
    cfg = model.config
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.copy_(
                permute(layer.self_attn.q_proj.weight, cfg.num_attention_heads))
            layer.self_attn.k_proj.weight.copy_(
                permute(layer.self_attn.k_proj.weight, cfg.num_key_value_heads))
    wrong = loss(model, ids)
    print(f"loss on a sentence: {right:.3f} (q/k un-permuted), {wrong:.3f} (as llama.cpp stores them)")
    if not right < wrong - 0.1:
        sys.exit("check_real_model: the un-permuted query/key rows do not model text better")
    save_file({"prompt_ids": prompt.contiguous(), "logits": logits.contiguous(),
               "generated_ids": generated.contiguous()},
              os.path.join(directory, "reference.safetensors"))
    print(f"check_real_model: wrote {directory}/reference.safetensors")


if __name__ == "__main__":
    main()
