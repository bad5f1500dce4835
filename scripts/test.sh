#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole CTest suite
# (unit tests, 2-rank MPI tests under mpiexec, launch tests, the fault suite;
# GPU tests skip without GPUs), then the ThreadSanitizer build of the
# threaded parts' tests (the `tsan` preset: Loader, checkpoint writer,
# watchdog, MpiComm's worker). Builds the `release` preset, or `ci` (warnings
# are errors) when CI=true. CTest arguments run just those tests of the main
# build, e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
preset=release
if [ "${CI:-}" = "true" ]; then preset=ci; fi

scripts/build.sh "$preset"
ctest --preset "$preset" "$@"
if [ $# -eq 0 ]; then
  scripts/build.sh tsan
  ctest --preset tsan
fi
