#!/usr/bin/env bash
# Installs the pinned torch wheel (scripts/torch-version: the one pin) into a
# virtual environment outside the clone, once per machine, and prints its path.
# Every clone on the machine, CI's fresh one included, builds against that
# LibTorch (CMake finds it through torch.utils.cmake_prefix_path), and the
# tests' Python references import the same torch from it.
#   location: $WANTRAIN_TORCH_VENV, else ${XDG_CACHE_HOME:-~/.cache}/wantrain/torch-<version>
# The venv sees Debian's Python packages (h5py, numpy, matplotlib, ...) and
# adds torch with its CUDA runtime, cuDNN and NCCL wheels (nvidia-*), ~4.6 GB.
# The download is not cached a second time (pip --no-cache-dir): the venv is
# the one copy. A half-made venv is never used: it is built beside and renamed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(tr -d '[:space:]' <"$here/torch-version")
venv=${WANTRAIN_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/wantrain/torch-$version}
python=/usr/bin/python3

have_torch() {
  [ -x "$venv/bin/python" ] &&
    [ "$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" = "$version" ]
}
if have_torch; then
  echo "$venv"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
# One installer at a time per machine (two clones building at once).
exec 9>"$venv.lock"
flock 9
if ! have_torch; then
  echo "install-torch: installing torch==$version into $venv (once per machine, ~4.6 GB)" >&2
  partial="$venv.partial"
  rm -rf "$partial"
  "$python" -m venv --system-site-packages "$partial"
  "$partial/bin/pip" install -q --no-cache-dir --disable-pip-version-check "torch==$version" >&2
  # A venv's scripts name its own path: make it again at the final place, then
  # move the installed packages over (same filesystem: a rename, no copy).
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$venv"
  site=lib/python3.$("$python" -c 'import sys; print(sys.version_info.minor)')/site-packages
  rm -rf "${venv:?}/$site"
  mv "$partial/$site" "$venv/$site"
  rm -rf "$partial"
  have_torch || { echo "install-torch: torch==$version did not import from $venv" >&2; exit 1; }
fi
echo "$venv"
