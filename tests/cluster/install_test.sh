#!/usr/bin/env bash
# The install tree as a cluster user meets it: `cmake --install` to a fresh
# prefix; `module use P/modulefiles && module load wantrain` under Lmod (the
# Lua modulefile, and its Tcl twin on its own); wantrain --version and a
# 2-rank job through the installed wanrun from a directory outside the
# source tree; and a tiny CMake project that find_package(wantrain)s and
# links wantrain::core.
# Environment (CTest sets it): WANTRAIN_BUILD_DIR, WANTRAIN_SOURCE_DIR, WORK_DIR.
set -euo pipefail
build=${WANTRAIN_BUILD_DIR:?}
src=${WANTRAIN_SOURCE_DIR:?}
work=${WORK_DIR:-/tmp/wantrain-cluster-tests}/install
fail() { echo "FAIL: $*" >&2; exit 1; }
lmod_init=/usr/share/lmod/lmod/init/bash
if [ ! -r "$lmod_init" ]; then
  echo "SKIP: Lmod is not installed ($lmod_init; the Debian package lmod)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/wantrain bin/wandata bin/wansample bin/wanbench bin/csvfit bin/wanrun share/wantrain/configs/wan-tiny.json \
         share/wantrain/slurm/train.sbatch share/wantrain/slurm/srun-wantrain share/wantrain/mpi/mca-params.conf \
         share/wantrain/plot_metrics.py lib/libwantrain_report.a \
         share/doc/wantrain/cluster.md include/wantrain/wan/model/model_config.hpp lib/cmake/wantrain/wantrainConfig.cmake; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done

# Outside the source tree, with nothing but the module on PATH.
run_dir="$work/elsewhere"
mkdir -p "$run_dir"
cd "$run_dir"
PATH=/usr/bin:/bin bash -euo pipefail -c '
  source '"$lmod_init"'
  module use '"$prefix"'/modulefiles
  module load wantrain
  [ "$WANTRAIN_ROOT" = '"$prefix"' ] || { echo "FAIL: WANTRAIN_ROOT is $WANTRAIN_ROOT"; exit 1; }
  [ "$(command -v wantrain)" = '"$prefix"'/bin/wantrain ] || { echo "FAIL: wantrain is $(command -v wantrain)"; exit 1; }
  shown=$(module show wantrain 2>&1)
  grep -q "MPI: Open MPI" <<<"$shown" || { echo "FAIL: the modulefile does not name its MPI"; exit 1; }
  wantrain --version | grep -q "^wantrain 0\." || { echo "FAIL: wantrain --version"; exit 1; }
  wandata synth --out data --samples 16 --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 >/dev/null
  wanrun --ranks-per-node 2 -- --model-config "$WANTRAIN_ROOT/share/wantrain/configs/wan-tiny.json" \
      --data data --steps 3 --batch-size 2 --threads 1 --output-dir run > wanrun.log 2>&1 \
    || { cat wanrun.log; echo "FAIL: the 2-rank job through the installed wanrun"; exit 1; }
  grep -q "world: 2 ranks" wanrun.log && grep -q "trained 3 steps" wanrun.log \
    || { cat wanrun.log; echo "FAIL: no 2-rank run in wanrun.log"; exit 1; }
  wantrain plot run > plot.log 2>&1 && [ -s run/plot.png ] \
    || { cat plot.log; echo "FAIL: wantrain plot with the installed share/wantrain/plot_metrics.py"; exit 1; }
  wantrain report run | grep -q "finished (exit status 0)" || { echo "FAIL: wantrain report of the installed job"; exit 1; }
  module unload wantrain
  ! command -v wantrain >/dev/null || { echo "FAIL: wantrain still on PATH after module unload"; exit 1; }
'
[ -f "$run_dir/run/model.safetensors" ] || fail "the installed job wrote no weights"

# The Tcl twin on its own (Lmod reads Tcl modulefiles too).
mkdir -p "$work/tcl/wantrain"
cp "$prefix"/modulefiles/wantrain/*[0-9] "$work/tcl/wantrain/"
bash -euo pipefail -c '
  source '"$lmod_init"'
  module use '"$work"'/tcl
  module load wantrain
  [ "$WANTRAIN_ROOT" = '"$prefix"' ] && [ "$(command -v wantrain)" = '"$prefix"'/bin/wantrain ]
' || fail "the Tcl modulefile did not set WANTRAIN_ROOT and PATH"

# Built with -DWANTRAIN_MODULE_MPI=NAME, each modulefile loads that MPI module
# first: the generated files with a stand-in MPI module put in.
mkdir -p "$work/mpi-modules/fakempi" "$work/with-mpi/wantrain"
printf 'setenv("FAKE_MPI_LOADED", "yes")\n' > "$work/mpi-modules/fakempi/1.0.lua"
sed 's/^local mpi_module = ""/local mpi_module = "fakempi"/' "$prefix"/modulefiles/wantrain/*.lua > "$work/with-mpi/wantrain/1.lua"
grep -q 'mpi_module = "fakempi"' "$work/with-mpi/wantrain/1.lua" || fail "the Lua modulefile has no mpi_module line to set"
mkdir -p "$work/with-mpi-tcl/wantrain"
sed 's/^set mpi_module ""/set mpi_module "fakempi"/' "$prefix"/modulefiles/wantrain/*[0-9] > "$work/with-mpi-tcl/wantrain/1"
grep -q 'set mpi_module "fakempi"' "$work/with-mpi-tcl/wantrain/1" || fail "the Tcl modulefile has no mpi_module line to set"
for dir in with-mpi with-mpi-tcl; do
  bash -euo pipefail -c '
    source '"$lmod_init"'
    module use '"$work"'/mpi-modules
    module use '"$work/$dir"'
    module load wantrain
    [ "${FAKE_MPI_LOADED:-}" = yes ]
  ' || fail "$dir: loading wantrain did not load its MPI module"
done

# find_package(wantrain) from another project.
cmake -S "$src/tests/cluster/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "consumer configure"; }
cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "consumer build"; }
out=$("$work/consumer/count_parameters" "$prefix/share/wantrain/configs/wan-tiny.json" "$work")
# wan-tiny: 163584 parameters; one latent frame of 2x2 patches (patch 1x2x2) in, out_dim 16 channels out;
# a sample of that shape drawn from the prompt of a one-sample dataset it wrote and read back.
expected="wantrain 0.1.0: 163584 parameters
forward: [1, 16, 1, 4, 4]
sampled: [16, 1, 4, 4] from sample 0 of 1"
[ "$out" = "$expected" ] || fail "consumer printed '$out'"
echo "PASS: installed tree, Lmod (Lua and Tcl), a 2-rank job from outside the source tree, find_package(wantrain), a forward of the DiT, and a sample from a dataset it wrote and read"
