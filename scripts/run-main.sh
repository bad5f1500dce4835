#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# then run wantrain on 2 ranks with the sample configuration.
# (Until the trainer lands, the run is --dry-run: it brings up MPI and the
# collectives on both ranks and prints the resolved configuration and world.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh release

# Open MPI refuses root without these, and 2 ranks on fewer than 2 cores
# without --oversubscribe; both are harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe build/release/apps/wantrain/wantrain --config data/run.ini --dry-run
