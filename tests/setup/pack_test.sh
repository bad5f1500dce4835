#!/usr/bin/env bash
# scripts/pack-deps.sh's archive, proven alone. A fresh Debian 12 root
# (mmdebstrap) holds only what a GPU machine has: a C++ toolchain, CMake,
# ninja, git, python3 with numpy, h5py and sentencepiece, the CUDA toolkit
# and the torch wheel's venv of scripts/install-torch.sh (both bound in,
# read-only). The
# archive is unpacked in /opt/wantrain-deps, nothing else of this machine is
# visible, and there wantrain builds (the release preset, against the
# wheel's LibTorch) and `ctest -L unit` passes.
#   tests/setup/pack_test.sh [WORK_DIR]      (default /tmp/wantrain-pack-test)
# Root only (chroot, mounts); needs the network for mmdebstrap and apt-get
# download. About 9 minutes on 2 cores (505 s on 2026-11-28), so it is a command of its
# own, not part of the CTest suite (docs/development.md, "GPU first-run kit").
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(realpath -m "${1:-/tmp/wantrain-pack-test}")
[ "$(id -u)" -eq 0 ] || { echo "pack_test: needs root (chroot and bind mounts)" >&2; exit 1; }
venv=$("$src/scripts/install-torch.sh")
root="$work/root"
cuda=$(readlink -f /usr/local/cuda)

cleanup() {
  for m in "$root$venv" "$root$cuda" "$root/proc" "$root/sys" "$root/dev/shm" "$root/dev" "$root/tmp"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  return 0
}
trap cleanup EXIT
cleanup
SECONDS=0
# PACK_TEST_REUSE=1 keeps WORK_DIR's archive and fresh root from an earlier
# run (while fixing the build there); the source and build are always anew.
if [ -n "${PACK_TEST_REUSE:-}" ] && [ -f "$work/pack/wantrain-deps.tar.xz" ] && [ -x "$root/usr/bin/cmake" ]; then
  echo "pack_test: reusing $work/pack and $root"
  rm -rf "$root/opt/wantrain-deps" "$root/src"
else
  rm -rf "$work"
  mkdir -p "$work"
  "$src/scripts/pack-deps.sh" "$work/pack"
  echo "pack_test: packed in ${SECONDS} s"
  command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap
  mmdebstrap --variant=apt --quiet \
    --include=build-essential,cmake,ninja-build,git,python3,python3-numpy,python3-h5py,python3-sentencepiece \
    bookworm "$root" "deb http://deb.debian.org/debian bookworm main"
  echo "pack_test: fresh root made in ${SECONDS} s"
fi

mkdir -p "$root/opt/wantrain-deps" "$root/src" "$root$venv" "$root$cuda"
ln -sfn "$cuda" "$root/usr/local/cuda"
tar -xJf "$work/pack/wantrain-deps.tar.xz" -C "$root/opt/wantrain-deps"
# The working tree as git sees it (tracked and untracked, not ignored files).
(cd "$src" && git ls-files -z -co --exclude-standard | tar --null -cf - -T -) | tar -xf - -C "$root/src"
mount --bind "$venv" "$root$venv"
mount -o remount,bind,ro "$root$venv"
mount --bind "$cuda" "$root$cuda"
mount -o remount,bind,ro "$root$cuda"
mount -t proc proc "$root/proc"
mount --bind /sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs tmpfs "$root/tmp"

chroot "$root" env -i HOME=/root PATH=/usr/local/cuda/bin:/usr/bin:/bin TERM=dumb WANTRAIN_TORCH_PYTHON="$venv/bin/python" \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash -euo pipefail -c '
  . /opt/wantrain-deps/env.sh
  cd /src
  cmake --preset release >/tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; exit 1; }
  cmake --build --preset release --target wantrain_unit_tests wantrain wandata wansample
  build/release/apps/wantrain/wantrain --version
  ctest --preset release -L unit
'
echo "pack_test: PASS in ${SECONDS} s: a fresh root with only the packed archive built wantrain and passed ctest -L unit"
