#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole CTest suite
# (unit tests, 2-rank MPI tests under mpiexec, launch tests; GPU tests skip
# without GPUs). Builds the `release` preset, or `ci` (warnings are errors)
# when CI=true. Any CTest arguments are passed on, e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
preset=release
if [ "${CI:-}" = "true" ]; then preset=ci; fi

scripts/build.sh "$preset"
ctest --preset "$preset" "$@"
