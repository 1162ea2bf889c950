"""Converts a llama.cpp GGUF file of a Llama-architecture model with a
GPT-2-style byte-level BPE tokenizer into a Hugging Face directory that
Trellis and transformers load (scripts/real_model.sh runs it):

  config.json              LlamaForCausalLM, every shape field from the
                           GGUF's llama.* metadata
  model.safetensors        every tensor dequantized (gguf.quants) to float32,
                           under Hugging Face's names; the query and key
                           projections un-permuted (llama.cpp's converter
                           interleaves their rows for its rope)
  tokenizer.json           the GGUF's tokens, merges and control tokens as a
                           byte-level BPE
  tokenizer_config.json    the special tokens and tokenizer.chat_template
  generation_config.json   the bos, eos and pad ids

  python gguf_to_hf.py MODEL.gguf OUT_DIR
"""
import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import save_file

# GGUF token types (gguf.TokenType): control tokens become special added tokens.
CONTROL = int(gguf.TokenType.CONTROL)
USER_DEFINED = int(gguf.TokenType.USER_DEFINED)

# llama.cpp's pre-tokenizers of Llama-architecture byte-level BPE models, as
# tokenizers' Split patterns run before ByteLevel's GPT-2 pattern. "smollm":
# every digit on its own (the original's Digits(individual_digits=true)).
PRE_SPLITS = {"smollm": [r"\p{N}"], "gpt2": []}

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            sys.exit(f"gguf_to_hf: {key} missing from the GGUF metadata")
        return default
    return f.contents()


def unpermute(w, n_head):
    """The inverse of llama.cpp's convert_hf_to_gguf.py LlamaModel.permute,
    which reorders each head's rows from (half, pair) to (pair, half)."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def hf_name(name):
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    blk, layer, part, kind = name.split(".")
    if blk != "blk" or part not in LAYER_NAMES:
        sys.exit(f"gguf_to_hf: tensor {name} has no Hugging Face name here")
    return f"model.layers.{layer}.{LAYER_NAMES[part]}.{kind}"


def weights(reader, n_head, n_kv_head):
    out = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dims fastest first
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_kv_head)
        out[hf_name(t.name)] = np.ascontiguousarray(w)
    return out


def config(reader, tied):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"gguf_to_hf: general.architecture is {arch!r}; only 'llama' is converted")
    p = lambda key, default=None: field(reader, f"llama.{key}", default)
    hidden, heads = int(p("embedding_length")), int(p("attention.head_count"))
    if int(p("rope.dimension_count", hidden // heads)) != hidden // heads:
        sys.exit("gguf_to_hf: llama.rope.dimension_count is not the head size (partial rotary)")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(p("feed_forward_length")),
        "num_hidden_layers": int(p("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(p("attention.head_count_kv", heads)),
        "head_dim": hidden // heads,
        "max_position_embeddings": int(p("context_length")),
        "rms_norm_eps": float(np.float32(p("attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(p("rope.freq_base", 10000.0)),
        "vocab_size": len(field(reader, "tokenizer.ggml.tokens")),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(reader, "tokenizer.ggml.padding_token_id", -1)),
    }


def tokenizer(reader):
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("gguf_to_hf: only tokenizer.ggml.model 'gpt2' (byte-level BPE) is converted")
    pre = field(reader, "tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_SPLITS:
        sys.exit(f"gguf_to_hf: tokenizer.ggml.pre {pre!r} is not one of {sorted(PRE_SPLITS)}")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [m.split(" ") for m in field(reader, "tokenizer.ggml.merges")]
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": ty == CONTROL}
             for i, (tok, ty) in enumerate(zip(tokens, types)) if ty in (CONTROL, USER_DEFINED)]
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
              for r in PRE_SPLITS[pre]]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": splits + [byte_level]},
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(tokens)}, "merges": merges},
    }, added


def tokenizer_config(reader, added):
    tokens = field(reader, "tokenizer.ggml.tokens")
    name = lambda key: tokens[int(field(reader, key))] if key in reader.fields else None
    return {
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                 for t in added},
        "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"),
        "pad_token": name("tokenizer.ggml.padding_token_id"),
        "unk_token": name("tokenizer.ggml.unknown_token_id"),
        "chat_template": field(reader, "tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
    }


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_to_hf.py MODEL.gguf OUT_DIR")
    path, out = sys.argv[1:]
    reader = gguf.GGUFReader(path)
    heads = int(field(reader, "llama.attention.head_count"))
    tensors = weights(reader, heads, int(field(reader, "llama.attention.head_count_kv", heads)))
    cfg = config(reader, tied="lm_head.weight" not in tensors)
    tok, added = tokenizer(reader)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    generation = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    files = {"config.json": cfg, "tokenizer.json": tok,
             "tokenizer_config.json": tokenizer_config(reader, added),
             "generation_config.json": dict(generation, do_sample=False)}
    for name, value in files.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False, indent=2)
            f.write("\n")
    print(f"gguf_to_hf: {os.path.basename(path)} -> {out} ({len(tensors)} tensors, "
          f"{sum(t.size for t in tensors.values()) / 1e6:.1f} M parameters)")


if __name__ == "__main__":
    main()
