# The Python environment the scripts that talk to transformers share
# (make_hf_fixtures.sh, make_tokenizer_fixtures.sh, make_chat_fixtures.sh,
# make_command_fixtures.sh, make_example_model.sh, check_hf_export.sh):
# pinned PyPI packages in a virtual environment, TRELLIS_FIXTURES_VENV
# (default .venv/fixtures).
# Sourced, from the repository root; defines:
#   FIXTURES_VENV            the environment's path
#   FIXTURES_PINNED          the packages, each name==version
#   fixtures_venv_ready      whether FIXTURES_VENV has every pinned version
#   fixtures_venv_ensure     makes FIXTURES_VENV (python3 -m venv, pip
#                            install) unless it is ready. torch comes from
#                            the venv of scripts/torch_venv.sh (the build's
#                            LibTorch, made there when absent), put on the
#                            new venv's path by a .pth file, so its wheel
#                            (some GB with its CUDA libraries) is fetched
#                            once; the rest is about 300 MB
FIXTURES_VENV=${TRELLIS_FIXTURES_VENV:-.venv/fixtures}
FIXTURES_PINNED=(torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy==2.4.6 peft==0.21.2
                 tokenizers==0.23.3 sentencepiece==0.2.3 jinja2==3.1.6)

fixtures_venv_ready() {
  "$FIXTURES_VENV/bin/python" - "${FIXTURES_PINNED[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
}

fixtures_venv_ensure() {
  if ! fixtures_venv_ready; then
    scripts/torch_venv.sh >/dev/null
    local torch_venv=${TRELLIS_TORCH_VENV:-.venv/torch}
    /usr/bin/python3 -m venv "$FIXTURES_VENV"
    local purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    realpath "$("$torch_venv/bin/python" -c "$purelib")" \
      > "$("$FIXTURES_VENV/bin/python" -c "$purelib")/trellis_torch.pth"
    "$FIXTURES_VENV/bin/pip" install --quiet --disable-pip-version-check "${FIXTURES_PINNED[@]}"
  fi
}
