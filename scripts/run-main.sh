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
# 256 training and 32 held-out samples of 5 latent frames of 16x16: wan-tiny
# learns them in a few hundred steps on 2 cores.
for set in "synth 256 1" "synth-val 32 2"; do
  read -r name samples seed <<<"$set"
  if [ ! -d "data/$name" ]; then
    build/release/apps/wandata/wandata synth --out "data/$name" --samples "$samples" --shards 2 --frames 5 \
      --size 16x16 --text-len 16 --text-dim 64 --seed "$seed"
  fi
  build/release/apps/wandata/wandata verify "data/$name"
done
mpirun -np 2 --oversubscribe build/release/apps/wantrain/wantrain --config data/run.ini \
  --data data/synth --val-data data/synth-val --output-dir runs/sample
build/release/apps/wansample/wansample --weights runs/sample/model.safetensors \
  --model-config runs/sample/model-config.json --data data/synth --index 0 --steps 30 \
  --out runs/sample/sample.h5 --png runs/sample/sample.png
