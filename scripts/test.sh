#!/usr/bin/env bash
# Every test: install what is missing (the peers the tests compare with too:
# scripts/install-peers.sh), build, run the whole CTest suite
# (unit tests, 2-rank MPI tests under mpiexec, launch tests, the fault suite;
# GPU tests skip without GPUs), check each test's time against the budget
# (tests/budget/), then the ThreadSanitizer build of the threaded parts'
# tests (the `tsan` preset: Loader, checkpoint writer, watchdog, MpiComm's
# worker). One build, the `release` preset (warnings are errors), for users
# and CI alike: after scripts/run-main.sh only the tests are left to compile.
# CTest arguments run just those tests of the main build, e.g.
#   scripts/test.sh -L unit
# At the end it prints the wall time of each stage.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=()
stage_start=$SECONDS
stage_done() {
  stages+=("$(printf '%-28s %5d s' "$1" $((SECONDS - stage_start)))")
  stage_start=$SECONDS
}
report() {
  echo "test.sh: wall time by stage"
  for s in "${stages[@]}"; do echo "  $s"; done
  printf '  %-28s %5d s\n' total "$SECONDS"
}
trap report EXIT

build=build/release
scripts/build.sh release
stage_done "build (release)"
# The peers the tests compare with (diffusers, transformers, peft; test-only,
# pinned in scripts/peer-versions), into the torch wheel's venv once per machine.
scripts/install-peers.sh >/dev/null
stage_done "peers (diffusers, ...)"

# The costs of the last measured run, so that a fresh build directory (CI's
# clone) starts the longest tests first; CTest updates the copy as it runs.
# A copy with fewer tests than the recorded costs (a few tests run by hand
# first) would order the whole suite by those few alone: it is replaced.
mkdir -p "$build/Testing/Temporary"
costs="$build/Testing/Temporary/CTestCostData.txt"
if [ ! -f "$costs" ] || [ "$(wc -l <"$costs")" -lt "$(wc -l <tests/budget/ctest-costs.txt)" ]; then
  cp tests/budget/ctest-costs.txt "$costs"
fi
times=("$build/test-times.xml")
if [ $# -gt 0 ]; then
  ctest --preset release --output-junit "$PWD/$build/test-times.xml" "$@"
  stage_done "ctest (release)"
else
  # The fault cases (label faults) mostly wait (sleeps, --comm-timeout 1):
  # beside another test each keeps both slots, one after another. They run
  # after the rest, two at a time (each still counts 2 processors): a fault
  # case's neighbour is then another that mostly waits, never a training.
  ctest --preset release -LE faults --output-junit "$PWD/$build/test-times.xml"
  stage_done "ctest (release)"
  times+=("$build/test-times-faults.xml")
  ctest --preset release -L faults -j 4 --output-junit "$PWD/$build/test-times-faults.xml"
  stage_done "ctest (release, faults)"
fi
python3 tests/budget/check_test_times.py --allowed tests/budget/long-tests.txt \
  --costs tests/budget/ctest-costs.txt "${times[@]}"

if [ $# -eq 0 ]; then
  scripts/build.sh tsan
  stage_done "build (tsan)"
  ctest --preset tsan
  stage_done "ctest (tsan)"
fi
