# Sourced, from the repository root: make_venv_with_torch VENV makes the
# virtual environment VENV whose torch is the build's own, that of
# scripts/torch_venv.sh (made there when absent), put on VENV's path by a
# .pth file after VENV's own packages: the torch wheel (some GB with its
# CUDA libraries) is fetched once for every Python environment here. Pip
# sees that torch as installed, so a pinned torch==2.15.0 is satisfied.
make_venv_with_torch() {
  local venv=$1 torch_venv=${TRELLIS_TORCH_VENV:-.venv/torch}
  local purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
  scripts/torch_venv.sh >/dev/null
  /usr/bin/python3 -m venv "$venv"
  realpath "$("$torch_venv/bin/python" -c "$purelib")" \
    > "$("$venv/bin/python" -c "$purelib")/trellis_torch.pth"
}
