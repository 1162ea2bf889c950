#!/usr/bin/env python3
"""Prints, one a line, the C++ sources under SOURCE_DIR that include LibTorch.

    torch_sources.py SOURCE_DIR

A source includes LibTorch when it, or a Trellis header it includes (followed
through every level of "..." includes resolved against SOURCE_DIR), includes
one of <torch/...>, <ATen/...>, <c10/...>, <caffe2/...>. cmake/trellis.cmake
gives LibTorch's precompiled header only to these sources: loading it costs
every translation unit ~6 CPU-seconds, wasted on one that never uses it
(docs/build.md). Headers not found under SOURCE_DIR (generated messages,
system and third-party headers) are taken not to include LibTorch.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
TORCH = re.compile(r"^(torch|ATen|c10|caffe2)/")
SKIP_DIRS = {".git", ".venv", "fuzz"}


def includes_torch(path, source_dir, memo):
    if path in memo:
        return memo[path]
    memo[path] = False  # an include cycle ends here
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    found = False
    for kind, name in INCLUDE.findall(text):
        if kind == "<" and TORCH.match(name):
            found = True
            break
        if kind == '"':
            header = os.path.join(source_dir, name)
            if os.path.isfile(header) and includes_torch(header, source_dir, memo):
                found = True
                break
    memo[path] = found
    return found


def torch_sources(source_dir):
    source_dir = os.path.abspath(source_dir)
    memo = {}
    found = []
    for root, dirs, files in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(files):
            if name.endswith((".cc", ".cu")):
                path = os.path.join(root, name)
                if includes_torch(path, source_dir, memo):
                    found.append(path)
    return found


if __name__ == "__main__":
    print("\n".join(torch_sources(sys.argv[1])))
