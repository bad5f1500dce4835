#!/usr/bin/env bash
# The GPU first-run kit: on a machine with an NVIDIA GPU and a torch wheel
# (no network needed), build wantrain against that machine's torch, run the
# GPU tests, then one training benchmark beside the same step in PyTorch.
#   scripts/gpu-first-run.sh [OUT_DIR]        (default runs/gpu-first-run)
# Environment:
#   WANTRAIN_TORCH_PYTHON  a python whose torch to build against (default:
#                          python3 if it imports a CUDA torch, else the
#                          venv of scripts/install-torch.sh)
#   STEPS                  timed training steps of the benchmark (default 20)
# Writes OUT_DIR/report.txt: the GPU, `ctest -L gpu`'s summary, wantrain's
# seconds per step and peak device memory (1 GPU, Wan2.1-1.3B, LoRA rank
# 32, 480p x 17 frames, bf16) and PyTorch's (scripts/vs_torch.py peer
# --device cuda: the same DiT under DDP, full weights, fused attention).
# Every step's log lies beside it. Build prerequisites (MPI, HDF5, FFmpeg,
# ...) must be installed, or packed by scripts/pack-deps.sh and carried
# (WANTRAIN_DEPS_ARCHIVE, default build/deps-pack/wantrain-deps.tar.xz):
# docs/development.md, "GPU first-run kit".
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/gpu-first-run}
steps=${STEPS:-20}
mkdir -p "$out"
report="$out/report.txt"
: >"$report"
say() { echo "$*" | tee -a "$report"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

say "# wantrain GPU first run, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1; then
  say "no GPU: nvidia-smi -L failed ($(head -1 "$out/nvidia-smi.txt")); nothing to run"
  exit 1
fi
say "GPU: $(head -1 "$out/nvidia-smi.txt")"

python=${WANTRAIN_TORCH_PYTHON:-}
if [ -z "$python" ] && python3 -c 'import torch; assert torch.version.cuda' 2>/dev/null; then python=$(command -v python3); fi
if [ -z "$python" ]; then python="$(scripts/install-torch.sh)/bin/python" || exit 1; fi
say "torch: $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())')"

# Without the build's Debian packages (no network there), the archive of
# scripts/pack-deps.sh, carried along: unpacked once, then its env.sh.
deps_archive=${WANTRAIN_DEPS_ARCHIVE:-build/deps-pack/wantrain-deps.tar.xz}
if ! command -v mpicxx >/dev/null && [ -f "$deps_archive" ]; then
  deps_dir=${WANTRAIN_DEPS_DIR:-/opt/wantrain-deps}
  [ -f "$deps_dir/env.sh" ] || { mkdir -p "$deps_dir" && tar -xJf "$deps_archive" -C "$deps_dir"; } || exit 1
  # shellcheck source=pack-deps-env.sh
  . "$deps_dir/env.sh"
  say "build packages: $deps_archive, unpacked in $deps_dir"
fi

# 1. Build against that torch (the release preset, as CI).
export WANTRAIN_TORCH_PYTHON="$python"
if ! { cmake --preset release && cmake --build --preset release; } >"$out/build.log" 2>&1; then
  say "build failed: $out/build.log"; tail -20 "$out/build.log"; exit 1
fi
version=$(build/release/apps/wantrain/wantrain --version | tr '\n' ' ')
say "$version"
# LibTorch's CUDA backend is loaded at start where the driver is (docs/development.md).
case "$version" in
  *", loaded)"*) ;;
  *) say "LibTorch's CUDA backend is not loaded in wantrain (see the version line): the GPU tests will skip" ;;
esac

# 2. The GPU tests (docs/development.md, "GPU code that has never run").
ctest --preset release -L gpu >"$out/ctest-gpu.log" 2>&1
say "ctest -L gpu (status $?): $(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log" | tail -1)"
grep -E '\*\*\*|Failed|Skipped' "$out/ctest-gpu.log" | tee -a "$report"

# 3. One training step, 1 GPU: Wan2.1-1.3B, LoRA rank 32, bf16, 480p x 17
#    frames (latents 5x60x104, 7,800 tokens), batch 1, on synthetic latents
#    and umT5-sized text (512 x 4096).
data="$out/data"
rm -rf "$data" "$out/run"
build/release/apps/wandata/wandata synth --out "$data" --samples 8 --shards 1 --frames 5 --size 60x104 \
  --text-len 512 --text-dim 4096 --seed 1 >"$out/synth.log" 2>&1 || { say "wandata synth failed: $out/synth.log"; exit 1; }
mpirun -np 1 build/release/apps/wantrain/wantrain --model-config data/configs/wan2.1-t2v-1.3b.json \
  --data "$data" --output-dir "$out/run" --lora-rank 32 --precision bf16 --batch-size 1 \
  --steps $((steps + 5)) --log-every 5 --require-gpu --backend nccl >"$out/wantrain.log" 2>&1
say "wantrain LoRA step (status $?), the last log line: $(grep -E 'step +[0-9]+' "$out/wantrain.log" | tail -1)"
grep -iE 'peak|device memory' "$out/wantrain.log" | tail -2 | tee -a "$report"

# 4. The same DiT in PyTorch on that GPU (full weights: the peer has no LoRA).
mpirun -np 1 "$python" scripts/vs_torch.py peer --model-config data/configs/wan2.1-t2v-1.3b.json \
  --device cuda --precision bf16 --batch-size 1 --frames 5 --size 60x104 --iters "$steps" --warmup 3 \
  >"$out/torch.log" 2>&1
say "PyTorch DDP full step (status $?): $(tail -1 "$out/torch.log")"
say "report: $report"
