#!/usr/bin/env bash
# Packs the Debian 12 packages that wantrain's build and tests link against
# (Open MPI, HDF5, FFmpeg, ICU, Boost.Program_options, protobuf, GoogleTest,
# spdlog/fmt, nlohmann-json, libcsv, TCMalloc, pkgconf) into one archive of at
# most 64 MiB, for a machine that has a compiler, CMake and a torch wheel but
# none of these and no network (a GPU machine: scripts/gpu-first-run.sh).
#   scripts/pack-deps.sh [OUT_DIR]     (default build/deps-pack)
# Writes OUT_DIR/wantrain-deps.tar.xz and OUT_DIR/packages.txt (name=version).
# On the other machine, from the clone's root:
#   mkdir -p /opt/wantrain-deps && tar -xJf wantrain-deps.tar.xz -C /opt/wantrain-deps
#   . /opt/wantrain-deps/env.sh        # paths for CMake, pkg-config, the loader, Open MPI
#   scripts/gpu-first-run.sh
# The archive holds the packages' files, unpacked with dpkg -x (nothing is
# installed, no root is needed there), less what a build never reads:
# documentation, static libraries (GoogleTest's stay), Fortran, Boost's
# headers beyond those the project includes, shared libraries nothing packed
# loads. Left out as the other machine's own: the C/C++ toolchain
# (build-essential's packages), python3 and Debian's required packages. Not
# packed: the ffmpeg CLI (it would double the archive; the unit tests that
# take its frames as their reference skip without it).
# Needs apt's package lists (apt-get update) and a network here.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build/deps-pack}")
limit_mib=64

# What the build and `ctest -L unit` need: install-deps.sh's build packages,
# without the tools that only the rest of the suite uses (SLURM, Lmod,
# clang, the ffmpeg CLI, python's packages).
build_packages=(
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev libboost-program-options-dev
  libgoogle-perftools-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcsv-dev libicu-dev
  libavformat-dev libavcodec-dev libswscale-dev libprotobuf-dev protobuf-compiler libgtest-dev
  pkgconf sentencepiece
)
# Pulled in by the packages' dependencies, never read by the build or its
# programs: Fortran (Open MPI's and HDF5's), autotools, fonts and data
# files, JavaScript, ssh (Open MPI's remote launch: one node here).
not_needed='^(gfortran-.*|libgfortran-.*-dev|libhdf5-openmpi-(hl-)?fortran-.*|autoconf|automake|autotools-dev|m4|catch2|fonts-.*|fontconfig|libjs-.*|openssh-client|shared-mime-info|icu-devtools)$'

work=$(mktemp -d)
chmod 755 "$work"  # apt-get download runs as the _apt user when root
trap 'rm -rf "$work"' EXIT
: >"$work/empty-status"
# The packages each set needs on an empty system (apt resolves against no
# installed package), so that the pack does not depend on this machine's state.
resolve() {
  apt-get -s -o Dir::State::status="$work/empty-status" install --no-install-recommends "$@" 2>"$work/resolve.err" \
    | awk '/^Inst / {print $2}' | sort -u
}
resolve "${build_packages[@]}" >"$work/want" ||
  { echo "pack-deps: apt-get could not resolve the build packages: $(tail -1 "$work/resolve.err")" >&2; exit 1; }
base_packages=(build-essential python3)
mapfile -t -O ${#base_packages[@]} base_packages < <(
  apt-cache dumpavail | awk '/^Package:/ {p=$2} /^Priority: required/ {print p}' | sort -u)
resolve "${base_packages[@]}" >"$work/base"
comm -23 "$work/want" "$work/base" | grep -Ev "$not_needed" >"$work/pack"
[ -s "$work/pack" ] || { echo "pack-deps: nothing to pack: $(tail -1 "$work/resolve.err")" >&2; exit 1; }

mkdir -p "$work/debs" "$work/root"
chmod 777 "$work/debs"
(cd "$work/debs" && xargs apt-get download -q <"$work/pack" >/dev/null) ||
  { echo "pack-deps: apt-get download failed (network, or apt-get update needed)" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done

root="$work/root"
libdir="$root/usr/lib/x86_64-linux-gnu"
# Some of Debian 12's packages still put libraries in /lib (libnl): merged
# into /usr/lib, as a merged-/usr system has them, where env.sh points.
for d in lib bin sbin; do
  if [ -d "$root/$d" ]; then
    mkdir -p "$root/usr/$d"
    cp -a "$root/$d/." "$root/usr/$d/"
    rm -rf "${root:?}/$d"
  fi
done
# Absolute links (Debian's /etc/alternatives, and a few into /usr/lib) would
# point out of the unpacked tree: each becomes relative to the tree.
find "$root" -type l | while read -r link; do
  target=$(readlink "$link")
  case "$target" in
    /etc/alternatives/*) continue ;;
    /lib/* | /bin/* | /sbin/*) target=/usr$target ;&
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$target")" "$link" ;;
  esac
done
# Development links to a library of the other machine's own (zlib,
# OpenSSL: base packages, not packed) name that library by its soname
# where Debian and Ubuntu keep it.
find "$libdir" -maxdepth 1 -name '*.so' -xtype l | while read -r link; do
  soname=$(basename "$(readlink "$link")" | sed -E 's/^(.*\.so\.[0-9]+).*/\1/')
  ln -sfn "/usr/lib/x86_64-linux-gnu/$soname" "$link"
done
find "$root" -xtype l ! -lname '/usr/lib/x86_64-linux-gnu/*' -delete
# Documentation, GoogleTest's sources (the build links its libraries),
# X11's locale tables, libtool's macros; Fortran; the Intel Media SDK's
# hardware plugins, which only its own runtime loads (not packed).
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,doc-base,gtk-doc,X11,libtool,aclocal} "$root/usr/src" \
  "$libdir"/{fortran,mfx}
# Static libraries: the build links shared ones (GoogleTest ships only
# static ones, and they stay).
find "$root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
# Boost: the headers that the project's two includes reach (with every
# platform's config header), not all 160 MiB of Boost 1.74.
printf '#include <boost/program_options.hpp>\n#include <boost/crc.hpp>\n' |
  g++ -std=c++17 -M -I "$root/usr/include" -x c++ - -o "$work/boost.d"
tr ' \\' '\n\n' <"$work/boost.d" | grep "^$root/usr/include/boost/" | sort -u >"$work/boost-used"
find "$root/usr/include/boost" -type f | grep -v -e "^$root/usr/include/boost/config/" | sort |
  comm -23 - "$work/boost-used" | xargs -r rm -f
find "$root/usr/include/boost" -type d -empty -delete
# Shared libraries: those the packed programs, Open MPI's and HDF5's
# plugins, and the libraries a build can link (each -dev package's lib*.so)
# load, followed through their NEEDED entries. The rest (Intel Media SDK's
# hardware plugins and the like) is loaded by nothing here.
needed() { objdump -p "$1" 2>/dev/null | awk '$1 == "NEEDED" {print $2}'; }
{
  find "$root/usr/bin" -type f
  find "$libdir" -mindepth 2 -name '*.so*' -type f
  find "$libdir" -maxdepth 1 -name '*.so' -type l -exec readlink -f {} \;
} | sort -u >"$work/queue"
: >"$work/keep"
while [ -s "$work/queue" ]; do
  cat "$work/queue" >>"$work/keep"
  while read -r f; do
    for so in $(needed "$f"); do
      if [ -e "$libdir/$so" ]; then echo "$libdir/$so"; readlink -f "$libdir/$so"; fi
    done
  done <"$work/queue" | sort -u | comm -23 - <(sort -u "$work/keep") >"$work/next"
  mv "$work/next" "$work/queue"
done
sort -u -o "$work/keep" "$work/keep"
find "$libdir" -maxdepth 1 -name '*.so.*' | while read -r f; do
  grep -qxF -e "$f" -e "$(readlink -f "$f")" "$work/keep" || rm -f "$f"
done
find "$root" -xtype l ! -lname '/usr/lib/x86_64-linux-gnu/*' -delete
# The alternatives that dpkg would have made: the commands under their plain names.
for tool in mpicc mpicxx mpic++ mpirun mpiexec h5pcc; do
  if [ -e "$root/usr/bin/$tool.openmpi" ]; then ln -sfn "$tool.openmpi" "$root/usr/bin/$tool"; fi
done
# h5pcc's prefix is /usr: relative to the script instead; it compiles
# with the packed mpicc, and links the shared libraries (no static ones
# are packed).
sed -i -e 's|^prefix=.*|prefix="$(cd "$(dirname "$(readlink -f "$0")")/.." \&\& pwd)"|' \
  -e 's|^CCBASE=.*|CCBASE="${prefix}/bin/mpicc"|' -e 's|^CLINKERBASE=.*|CLINKERBASE="${prefix}/bin/mpicc"|' \
  -e 's|^STATIC_AVAILABLE=.*|STATIC_AVAILABLE="no"|' "$root"/usr/bin/h5pcc.openmpi 2>/dev/null || true

cp scripts/pack-deps-env.sh "$root/env.sh"
mkdir -p "$out"
(cd "$work/debs" && ls *.deb | sed 's/_/=/; s/_.*//') >"$out/packages.txt"
tar -cJf "$out/wantrain-deps.tar.xz" -C "$root" .
size=$(stat -c %s "$out/wantrain-deps.tar.xz")
echo "pack-deps: $(wc -l <"$out/packages.txt") packages, $((size / 1048576)) MiB: $out/wantrain-deps.tar.xz"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
  echo "pack-deps: the archive is over $limit_mib MiB" >&2
  exit 1
fi
