#!/usr/bin/env bash
# A LoRA fine-tune of the real wan2.1-t2v-1.3b config on 2 ranks with
# data/lora.ini, on a machine without released weights: the base is a
# stand-in (`wantrain export --random-head`: the seed's weights, bf16, the
# official layout), the data a tiny synthetic set with Wan's text width
# 4096, repeated for 6 epochs. It prints each rank's peak RSS against the
# base's bf16 bytes (the goal: at most 1.5x) and seconds per step.
#
#   scripts/lora-1.3b.sh [DIR] [more wantrain options]
#
# DIR (default $TMPDIR/wantrain-lora-1.3b) keeps the 2.8 GB base and the
# data between runs; about 3 minutes on 2 cores, 8 GB of memory, 3 GB disk.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TMPDIR:-/tmp}/wantrain-lora-1.3b
if [[ $# -gt 0 && $1 != -* ]]; then
  dir=$1
  shift
fi
bin=${WANTRAIN_BIN:-build/release/apps}  # WANTRAIN_BIN: another build's apps/ (it must be built)
[[ -n ${WANTRAIN_BIN:-} || -x $bin/wantrain/wantrain ]] || scripts/build.sh release
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$dir"
config=data/configs/wan2.1-t2v-1.3b.json
# The export writes its file atomically; the data directory is made under
# another name and renamed, so an interrupted run leaves nothing half made.
[[ -f $dir/base.safetensors ]] ||
  "$bin/wantrain/wantrain" export --model-config "$config" --seed 1 --random-head --dtype bf16 \
    --out "$dir/base.safetensors"
if [[ ! -d $dir/data ]]; then
  rm -rf "$dir/data.partial"
  "$bin/wandata/wandata" synth --out "$dir/data.partial" --samples 8 --shards 2 --size 16x16 --text-len 16 \
    --text-dim 4096 --seed 1
  mv "$dir/data.partial" "$dir/data"
fi
rm -rf "$dir/run"
mpirun -np 2 --oversubscribe "$bin/wantrain/wantrain" --config data/lora.ini --init "$dir/base.safetensors" \
  --data "$dir/data" --val-data "$dir/data" --output-dir "$dir/run" --threads 1 \
  --steps 24 --lr 2e-3 --warmup-steps 0 --text-drop 0 --timestep-sampling uniform --shift 1 \
  --log-every 4 --val-every 12 --save-every 0 "$@" | tee "$dir/run.log"

base_mib=$(($(stat -c %s "$dir/base.safetensors") / 1048576))
python3 - "$dir/run/metrics.jsonl" "$base_mib" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
base = int(sys.argv[2])
steps = [l for l in lines if "loss" in l]
val = [l["val_loss"] for l in lines if "val_loss" in l]
rss = lines[-1]["peak_rss_mib_per_rank"]
step_s = sum(l["step_s"] for l in steps[1:]) / max(1, len(steps) - 1)  # the first logged steps include warm-up
print(f"base: {base} MiB in bf16; peak RSS per rank: "
      + ", ".join(f"{r:.0f} MiB = {r / base:.2f}x" for r in rss)
      + f" (goal <= 1.5x); {step_s:.2f} s/step after the first 4;"
      + f" loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}, validation {val[0]:.3f} -> {val[-1]:.3f}")
PY
