#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build
# the three programs it runs, make a small synthetic dataset, train wan-mini on it with 2 ranks using the
# sample configuration (data/run.ini; TensorBoard files and a sample every 400
# steps), plot the metrics and print the run report, then sample from the
# trained weights with a PNG preview. Everything lands in runs/sample/.
set -euo pipefail
cd "$(dirname "$0")/.."

# Only the programs this job runs: the tests, fuzzers and benchmarks are
# scripts/test.sh's to build, into the same build/release.
scripts/build.sh release wantrain wandata wansample

# Open MPI refuses root without these, and 2 ranks on fewer than 2 cores
# without --oversubscribe; both are harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 16 training and 32 held-out samples of the same synthetic task (3 latent
# frames of 16x16, unit-scale latents): wan-mini learns them in 2400 steps on
# 2 cores, its samples match the training data and the validation loss falls.
# The script owns these two directories and makes them afresh each run.
for set in "synth 16 1" "synth-val 32 2"; do
  read -r name samples seed <<<"$set"
  rm -rf "data/$name"
  build/release/apps/wandata/wandata synth --out "data/$name" --samples "$samples" --shards 2 --frames 3 \
    --size 16x16 --text-len 16 --text-dim 64 --seed "$seed"
  build/release/apps/wandata/wandata verify "data/$name"
done
mpirun -np 2 --oversubscribe build/release/apps/wantrain/wantrain --config data/run.ini \
  --data data/synth --val-data data/synth-val --output-dir runs/sample
# What a person looks at: the loss, rate, throughput and step-time split as a
# PNG, and how the run went (run.json) as a table.
build/release/apps/wantrain/wantrain plot runs/sample --out runs/sample/plot.png
build/release/apps/wantrain/wantrain report runs/sample
# 50 UniPC steps from the EMA weights with the run's shift, at guidance 2 (the
# samples during training draw the same way); --compare prints how close the
# sample is to training sample 0's latents: 0.9 or more.
build/release/apps/wansample/wansample --weights runs/sample/ema.safetensors \
  --model-config runs/sample/model-config.json --data data/synth --index 0 --steps 50 --shift 20 --cfg 2 --compare \
  --out runs/sample/sample.h5 --png runs/sample/sample.png
