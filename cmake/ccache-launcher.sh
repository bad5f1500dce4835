#!/bin/sh
# CMake's compiler launcher: ccache, set up so that a fresh clone on the same
# machine (CI's) hits the objects of the builds before it (CMakeLists.txt).
# Usage: ccache-launcher.sh SOURCE_DIR CCACHE COMPILER ARGS...
base_dir=$1
ccache=$2
shift 2
# Paths under the source tree are hashed relative to it; the precompiled
# header is cacheable (ccache's manual: pch_defines,time_macros); -g builds
# do not hash the working directory.
export CCACHE_BASEDIR="$base_dir" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
# The precompiled header's own compile: the .gch of the last build sits beside
# the header it is compiled from, so ccache would take it for a PCH in use and
# hash it into the key, which then matches no other build. Remove it first.
case " $* " in
*" -x c++-header "*)
  previous=
  for arg in "$@"; do
    if [ "$previous" = "-o" ]; then rm -f "$arg"; fi
    previous=$arg
  done
  ;;
esac
exec "$ccache" "$@"
