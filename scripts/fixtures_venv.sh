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
#                            install) unless it is ready; its torch is the
#                            build's (scripts/venv_with_torch.sh), the rest
#                            about 300 MB from PyPI
#   fixtures_venv_ensure_or_skip  the same, or exit 77 (ctest's skip) saying
#                            why when it cannot be made
source scripts/venv_with_torch.sh
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
    make_venv_with_torch "$FIXTURES_VENV"
    "$FIXTURES_VENV/bin/pip" install --quiet --disable-pip-version-check "${FIXTURES_PINNED[@]}"
  fi
}

# For a script's --if-venv: makes FIXTURES_VENV, or where it cannot be made
# (no network, no PyPI) exits 77 (ctest's skip) saying why.
fixtures_venv_ensure_or_skip() {
  if ! fixtures_venv_ensure; then
    echo "SKIPPED: could not make the venv at $FIXTURES_VENV with ${FIXTURES_PINNED[*]}" \
      "from PyPI (the pip output above says why)"
    exit 77
  fi
}
