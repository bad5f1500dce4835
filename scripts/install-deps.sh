#!/usr/bin/env bash
# Installs the Debian 12 packages that wantrain's build, tests and tools need,
# only those that are missing. Safe to run again; does nothing when all are there.
# Runs apt-get as root, or through sudo when the caller is not root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libtsan2                             # the tsan preset (ThreadSanitizer's runtime; g++ usually brings it)
  libtorch-dev
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev zlib1g-dev
  libopenblas0-openmp                  # LibTorch's fp32 matrix products: the default reference BLAS is ~27x slower
  libgoogle-perftools-dev              # TCMalloc for the apps: less resident memory and faster steps than glibc's malloc
  nlohmann-json3-dev libspdlog-dev libfmt-dev
  libcsv-dev                           # csvfit reads CSV with libcsv (RFC 4180)
  libgtest-dev
  clang-format                         # the `format` test checks .clang-format's style
  clang libclang-rt-14-dev             # the libFuzzer target of tests/fuzz (clang's fuzzer runtime)
  python3 python3-h5py python3-numpy   # the h5py example of docs/data-format.md is tested
  python3-torch                        # an independent PyTorch evaluation of Wan's forward pass checks WanModel
  slurm-wlm munge                      # the slurm/ scripts are tested on a real single-node SLURM
  lmod                                 # the installed modulefile is tested with `module load`
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: missing packages (${missing[*]}) and not root, no sudo: install them as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
