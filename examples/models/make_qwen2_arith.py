#!/usr/bin/env python3
"""Writes the example Hugging Face model of examples/jobs/hf_grpo.yaml.

    make_qwen2_arith.py MODEL_DIR DATA_DIR

Run through scripts/make_example_model.sh, which makes the virtual
environment (transformers, tokenizers, torch from PyPI). It writes:

  MODEL_DIR/  a tiny Qwen2ForCausalLM as transformers initializes it (2
      layers, hidden 128, 4 heads over 2 KV heads, query/key/value biases),
      stored in bfloat16: config.json, generation_config.json,
      model.safetensors; a byte-level BPE tokenizer trained with `tokenizers`
      on chat-formatted arithmetic, with Qwen2's split pattern (one digit a
      token), tokenizer.json, and tokenizer_config.json with a ChatML chat
      template; <|im_end|> and <|endoftext|> both end a response.
  DATA_DIR/chat_arith_train.jsonl, chat_arith_eval.jsonl: 1-2-digit
      additions as {"messages": [{"role": "user", "content": "47+85="}],
      "answer": "132"}, every distinct problem once, a seeded shuffle, 10%
      held out.

Deterministic: the same package versions rewrite the same bytes.
"""
import json
import os
import random
import sys

import tokenizers
import torch
import transformers
from tokenizers import Regex, models, pre_tokenizers, decoders, trainers

SEED = 7
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split: letters in runs, each digit alone.
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def problems():
    rng = random.Random(SEED)
    pairs = [(a, b) for a in range(100) for b in range(100)]
    rng.shuffle(pairs)
    return [{"messages": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)}
            for a, b in pairs]


def chat_text(example):
    user = example["messages"][0]["content"]
    return (f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
            f"{example['answer']}<|im_end|>\n")


def train_tokenizer(corpus):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


def main(model_dir, data_dir):
    examples = problems()
    held_out = len(examples) // 10
    os.makedirs(data_dir, exist_ok=True)
    for name, part in (("eval", examples[:held_out]), ("train", examples[held_out:])):
        with open(os.path.join(data_dir, f"chat_arith_{name}.jsonl"), "w") as f:
            for e in part:
                f.write(json.dumps(e) + "\n")

    tok = train_tokenizer([chat_text(e) for e in examples[held_out:]])
    os.makedirs(model_dir, exist_ok=True)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(model_dir)

    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    config = transformers.Qwen2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=384,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=eos,
        pad_token_id=tok.token_to_id("<|endoftext|>"))
    torch.manual_seed(SEED)
    model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = transformers.GenerationConfig(
        eos_token_id=eos, pad_token_id=config.pad_token_id, do_sample=False)
    model.save_pretrained(model_dir)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
