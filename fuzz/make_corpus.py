#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the repository's
examples and test fixtures (run from anywhere; the output is committed).
Each seed is small: a few lines of a dataset, one job, one template. Files
named regression_* are inputs that once crashed a target, kept as they are."""
import glob
import json
import os
import struct
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def path(*parts):
    return os.path.join(ROOT, *parts)


def write(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def head(file, lines):
    with open(file, encoding="utf-8") as f:
        return "".join(f.readlines()[:lines])


def fdp_string(text):
    """text as FuzzedDataProvider::ConsumeRandomLengthString reads it back:
    backslashes doubled, ended by a backslash and one more byte."""
    return text.replace("\\", "\\\\") + "\\\n"


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# requests_fuzzer: its first byte picks the message (fuzz/requests_fuzzer.cc).
REQUESTS = [
    ("GenerateRequest", 'prompts { id: 1 text: "2+3=" token_ids: [5, 6, 7] answer: "5" } '
                        'prompts { id: 2 token_ids: [8] } responses_per_prompt: 4 '
                        'sampling { temperature: 1.0 top_p: 0.9 max_new_tokens: 16 }'),
    ("TrainBatch", 'samples { prompt_tokens: [1, 2] response_tokens: [3, 4] '
                   'old_logprobs: [-0.5, -0.25] ref_logprobs: [-0.5, -0.3] '
                   'advantage: 1 reward: 1 }'),
    ("SftBatch", 'pairs { prompt_tokens: [1, 2, 3] target_tokens: [4, 5] trained: [true, false] }'),
    ("PreferenceBatch", 'pairs { prompt_tokens: [1] chosen_tokens: [2, 3] rejected_tokens: [4] '
                        'ref_chosen_logprob: -1.5 ref_rejected_logprob: -2 }'),
    ("LogProbRequest", 'samples { prompt_id: 1 prompt_tokens: [1, 2] response_tokens: [3] }'),
    ("VerifyRequest", 'items { prompt: "2+3=" response: "5" answer: "5" } '
                      'items { response: "6" answer: "5" metadata_json: "{\\"k\\": 1}" }'),
    ("LedgerReport", 'worker_id: "actor-0"'),
    ("HeartbeatRequest", 'worker_id: "learner-0" ledger_step: 3'),
    ("FetchWeightsRequest", 'min_version: 2 wait_ms: 1000'),
]


def encode(message, text):
    return subprocess.run(
        ["protoc", f"--encode=trellis.v1.{message}", "-I", path("proto")] +
        sorted(glob.glob(path("proto", "trellis", "v1", "*.proto"))),
        input=text.encode(), check=True, stdout=subprocess.PIPE).stdout


def main():
    # Inputs that once crashed a target (regression_*) stay; the rest is made afresh.
    for f in glob.glob(os.path.join(OUT, "*", "*")):
        if not os.path.basename(f).startswith("regression_"):
            os.remove(f)
    for f in sorted(glob.glob(path("examples", "jobs", "*.yaml")) +
                    glob.glob(path("examples", "memory", "*.yaml"))):
        write("job_yaml_fuzzer", os.path.basename(os.path.dirname(f)) + "_" + os.path.basename(f),
              open(f, encoding="utf-8").read())
    write("job_yaml_fuzzer", "empty.yaml", "")
    for f in sorted(glob.glob(path("examples", "data", "*.jsonl")) +
                    [path("examples", "verifiers", "samples.jsonl")]):
        write("jsonl_fuzzer", os.path.basename(f), head(f, 3))
    write("safetensors_fuzzer", "f32_bf16_i64.safetensors", safetensors({
        "w": ("F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0)),
        "b": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
        "ids": ("I64", [2], struct.pack("<2q", 7, -1))}, {"format": "pt"}))
    write("safetensors_fuzzer", "scalar_and_empty.safetensors", safetensors({
        "s": ("F16", [], b"\x00\x3c"), "e": ("U8", [0, 3], b""),
        "m": ("BOOL", [2], b"\x01\x00")}))
    write("safetensors_fuzzer", "f64.safetensors", safetensors({
        "d": ("F64", [1, 2], struct.pack("<2d", 0.5, 1e300))}))
    texts = json.load(open(path("tests", "fixtures", "tokenizers", "corpus.json"),
                           encoding="utf-8"))
    for name in ("gpt2", "llama3", "qwen2"):
        tokenizer = open(path("tests", "fixtures", "tokenizers", name, "tokenizer.json"),
                         encoding="utf-8").read()
        write("tokenizer_json_fuzzer", name, fdp_string(texts[0]) + tokenizer)
    for i, text in enumerate(texts[:8]):
        for pick in range(5):  # char, gpt2, llama3, qwen2, own alphabet
            write("tokenize_fuzzer", f"{pick}_{i}", bytes([pick]) + text.encode())
    conversations = json.load(open(path("tests", "fixtures", "chat", "conversations.json"),
                                   encoding="utf-8"))
    first = json.dumps(next(iter(conversations.values()))["messages"])
    for d in sorted(glob.glob(path("tests", "fixtures", "chat", "*", ""))):
        name = os.path.basename(os.path.dirname(d))
        jinja = os.path.join(d, "chat_template.jinja")
        template = json.load(open(os.path.join(d, "tokenizer_config.json"))).get("chat_template")
        if os.path.exists(jinja):
            template = open(jinja, encoding="utf-8").read()
        if isinstance(template, list):
            template = next(t["template"] for t in template if t["name"] == "default")
        write("chat_template_fuzzer", name, fdp_string(first) + template)
    for pick, (message, text) in enumerate(REQUESTS):
        write("requests_fuzzer", f"{pick}_{message}", bytes([pick]) + encode(message, text))


if __name__ == "__main__":
    main()
