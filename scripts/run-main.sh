#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# make a small synthetic dataset, train wan-tiny on it with 2 ranks using the
# sample configuration (data/run.ini), then sample from the trained weights
# with a PNG preview. Everything lands in runs/sample/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh release

# Open MPI refuses root without these, and 2 ranks on fewer than 2 cores
# without --oversubscribe; both are harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -d data/synth ]; then
  build/release/apps/wandata/wandata synth --out data/synth --samples 256 --shards 4 --frames 5 --size 32x32 \
    --text-len 16 --text-dim 64 --seed 1
fi
build/release/apps/wandata/wandata verify data/synth
mpirun -np 2 --oversubscribe build/release/apps/wantrain/wantrain --config data/run.ini --data data/synth \
  --output-dir runs/sample
build/release/apps/wansample/wansample --weights runs/sample/model.safetensors \
  --model-config runs/sample/model-config.json --data data/synth --index 0 --steps 30 \
  --out runs/sample/sample.h5 --png runs/sample/sample.png
