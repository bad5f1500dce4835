#!/usr/bin/env bash
# Configures and builds wantrain with a CMake preset (default: release),
# installing missing packages first. Usage: scripts/build.sh [PRESET [TARGET...]]
# With targets, builds only those (scripts/run-main.sh builds the apps it runs).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true

scripts/install-deps.sh
cmake --preset "$preset"
if [ $# -gt 0 ]; then
  cmake --build --preset "$preset" --target "$@"
else
  cmake --build --preset "$preset"
fi
