#!/usr/bin/env bash
# Configures and builds wantrain with a CMake preset (default: release),
# installing missing Debian packages first. Usage: scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}

scripts/install-deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset"
