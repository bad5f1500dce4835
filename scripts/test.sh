#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole CTest suite
# (unit tests, 2-rank MPI tests under mpiexec, launch tests, the fault suite;
# GPU tests skip without GPUs), check each test's time against the budget
# (tests/budget/), then the ThreadSanitizer tests of the threaded parts
# (the `tsan` preset: Loader, checkpoint writer, watchdog, MpiComm's
# worker). The tsan build runs beside the release tests at idle priority
# (SCHED_IDLE): it gets only the CPU time those tests leave unused (the
# cluster tests mostly wait), so they run as fast as without it. One build, the `release` preset (warnings are errors), for users
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
tsan_pid=
finish() {
  [ -z "$tsan_pid" ] || kill -- "-$tsan_pid" 2>/dev/null || true  # its process group: ninja and the compilers
  report
}
trap finish EXIT
# Runs a command at idle priority: SCHED_IDLE where chrt has it, else nice 19.
idle() {
  if chrt --idle 0 true 2>/dev/null; then chrt --idle 0 "$@"; else nice -n 19 "$@"; fi
}

build=build/release
scripts/build.sh release
stage_done "build (release)"

tsan_log=build/tsan-build.log
if [ $# -eq 0 ]; then
  export -f idle
  # In a session of its own, so that a failed ctest stops the whole build.
  setsid bash -c 'idle scripts/build.sh tsan && echo "test.sh: the tsan build took $SECONDS s at idle priority"' \
    >"$tsan_log" 2>&1 </dev/null &
  tsan_pid=$!
fi

# The costs of the last measured run, so that a fresh build directory (CI's
# clone) starts the longest tests first; CTest updates the copy as it runs.
mkdir -p "$build/Testing/Temporary"
[ -f "$build/Testing/Temporary/CTestCostData.txt" ] ||
  cp tests/budget/ctest-costs.txt "$build/Testing/Temporary/CTestCostData.txt"
ctest --preset release --output-junit "$PWD/$build/test-times.xml" "$@"
stage_done "ctest (release)"
python3 tests/budget/check_test_times.py --allowed tests/budget/long-tests.txt "$build/test-times.xml"

if [ $# -eq 0 ]; then
  status=0
  wait "$tsan_pid" || status=$?
  tsan_pid=
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$tsan_log"
    echo "test.sh: the tsan build failed (status $status); its whole log: $tsan_log"
    exit "$status"
  fi
  tail -n 1 "$tsan_log"
  stage_done "build (tsan), rest after ctest"
  ctest --preset tsan
  stage_done "ctest (tsan)"
fi
