#!/usr/bin/env bash
# The slurm/ scripts against the real single-node SLURM of slurm-up.sh:
#   slurm_test.sh train     sbatch train.sbatch: a 2-task wan-tiny run to completion
#   slurm_test.sh sweep     a 3-task job array: 3 output directories, each with its own line
#   slurm_test.sh preempt   scancel -s USR1 mid-run: checkpoint, exit 75, requeue, resume;
#                           final weights equal to an uninterrupted run's
# Environment (CTest sets it): SLURM_CONF, WANTRAIN, WANDATA, WANTRAIN_SOURCE_DIR, WORK_DIR.
# Exit 77 (skipped) when no SLURM is up.
set -euo pipefail
what=${1:?usage: slurm_test.sh train|sweep|preempt}
src=${WANTRAIN_SOURCE_DIR:?}
work=${WORK_DIR:-/tmp/wantrain-slurm-tests}/$what
: "${WANTRAIN:?}" "${WANDATA:?}"
export WANTRAIN

if [ ! -r "${SLURM_CONF:-/nonexistent}" ] || ! timeout 20 sinfo -h >/dev/null 2>&1; then
  echo "SKIP: no SLURM cluster is up (tests/cluster/slurm-up.sh needs root and the slurm-wlm, munge packages)"
  exit 77
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=slurm-common.sh
. "$(dirname "$0")/slurm-common.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$WANDATA" synth --out data --samples 32 --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 --seed 6 >/dev/null
common=(--model-config "$src/data/configs/wan-tiny.json" --data "$work/data" --batch-size 2 --threads 1
        --backend mpi --log-every 1 --seed 5)

case "$what" in
train)
  sbatch_wait 120 --chdir="$work" --ntasks-per-node=2 --output="$work/train-%j.out" \
    "$src/slurm/train.sbatch" "${common[@]}" --lr 1e-3 --steps 6 --output-dir "$work/run" \
    || { cat "$work"/train-*.out; fail "sbatch train.sbatch exited non-zero"; }
  out=$(cat "$work"/train-*.out)
  grep -q "world: 2 ranks" <<<"$out" || { echo "$out"; fail "not 2 ranks"; }
  grep -q "trained 6 steps" <<<"$out" || { echo "$out"; fail "no 6 steps"; }
  grep -q "wantrain exited with status 0" <<<"$out" || { echo "$out"; fail "no clean exit line"; }
  [ -f "$work/run/model.safetensors" ] || fail "no model.safetensors"
  echo "PASS: train.sbatch ran 2 tasks to completion"
  ;;
sweep)
  printf '# three learning rates\n--lr 1e-4\n\n--lr 3e-4\n--lr 1e-3 --warmup-steps 1\n' > sweep.txt
  WANTRAIN_SWEEP_DIR="$work/sweep" sbatch_wait 120 --chdir="$work" --array=0-2 --output="$work/sweep-%A_%a.out" \
    "$src/slurm/sweep.sbatch" sweep.txt "${common[@]}" --steps 3 \
    || { cat "$work"/sweep-*.out; fail "sbatch sweep.sbatch exited non-zero"; }
  for i in 0 1 2; do
    why=$(slurm_check_sweep_task "$work" sweep.txt "$i") || { cat "$work"/sweep-*.out; fail "$why"; }
  done
  [ "$(sort -u "$work"/sweep/task-*/sweep-line.txt | wc -l)" -eq 3 ] || fail "the tasks did not take 3 distinct lines"
  echo "PASS: a 3-task array sweep wrote 3 output directories with their own lines"
  ;;
preempt)
  # Enough steps that the signal lands mid-run: a step is 10 ms on an idle
  # machine now (16x16 latents, batch 4), and scancel can take a second or
  # two to arrive on a loaded one; 300 steps (3 s) lost that race once, 800
  # (8 s, the signal sent after 20) leave 6 s.
  steps=800
  "$WANDATA" synth --out data16 --samples 32 --shards 2 --frames 1 --size 16x16 --text-len 16 --text-dim 64 --seed 6 >/dev/null
  common=(--model-config "$src/data/configs/wan-tiny.json" --data "$work/data16" --batch-size 4 --threads 1
          --backend mpi --log-every 1 --seed 5)
  sbatch_wait 240 --chdir="$work" --ntasks-per-node=2 --output="$work/straight-%j.out" \
    "$src/slurm/train.sbatch" "${common[@]}" --lr 1e-3 --steps $steps --output-dir "$work/straight" \
    || { cat "$work"/straight-*.out; fail "the uninterrupted run failed"; }
  # Submits run NAME, signals it with `scancel -s USR1 [OPTIONS]` once training
  # is under way (20 steps logged), and waits until it has checkpointed,
  # exited 75 and requeued itself (pending, with a restart counted).
  signal_and_requeue() {  # name, scancel options...
    local name=$1; shift
    job=$(sbatch --parsable --chdir="$work" --ntasks-per-node=2 --output="$work/$name-%j.out" \
      "$src/slurm/train.sbatch" "${common[@]}" --lr 1e-3 --steps $steps --output-dir "$work/$name")
    for _ in $(seq 600); do
      n=$(grep -c '"loss"' "$work/$name/metrics.jsonl" 2>/dev/null || true)
      [ "${n:-0}" -ge 20 ] && break
      sleep 0.1
    done
    scancel -s USR1 "$@" "$job"
    for _ in $(seq 120); do
      scontrol show job "$job" 2>/dev/null | grep -q "Restarts=1" && break
      sleep 0.5
    done
    scontrol show job "$job" | grep -q "Restarts=1" || { cat "$work/$name-$job.out"; fail "job $job was not requeued"; }
  }
  signal_and_requeue preempted
  slurm_start_requeued "$job"
  wait_gone "$job" 240
  out=$(cat "$work/preempted-$job.out")
  grep -q "stopping at step [0-9]* on SIGUSR1: checkpoint" <<<"$out" || { echo "$out"; fail "no checkpoint on USR1"; }
  grep -q "wantrain checkpointed (status 75): requeueing" <<<"$out" || { echo "$out"; fail "no requeue on status 75"; }
  grep -q "restart 1:" <<<"$out" || { echo "$out"; fail "the requeued job did not start again"; }
  grep -qF "] resume: $work/preempted/step-" <<<"$out" || { echo "$out"; fail "the requeued job did not resume"; }
  grep -q "wantrain exited with status 0" <<<"$out" || { echo "$out"; fail "the requeued job did not finish"; }
  cmp "$work/straight/model.safetensors" "$work/preempted/model.safetensors" \
    || fail "the pre-empted run's final weights differ from the uninterrupted run's"
  # The time-limit path: --signal=B:USR1 signals only the batch shell, which forwards it.
  signal_and_requeue batch --batch
  scancel "$job" 2>/dev/null || true
  wait_gone "$job" 60
  out=$(cat "$work/batch-$job.out")
  grep -q "USR1 received: asking every rank to checkpoint" <<<"$out" || { echo "$out"; fail "the batch shell did not forward USR1"; }
  grep -q "stopping at step [0-9]* on SIGUSR1: checkpoint" <<<"$out" || { echo "$out"; fail "no checkpoint on the forwarded USR1"; }
  grep -q "wantrain checkpointed (status 75): requeueing" <<<"$out" || { echo "$out"; fail "no requeue after the forwarded USR1"; }
  echo "PASS: USR1 -> checkpoint -> exit 75 -> requeue -> resume; final weights identical; the batch shell forwards USR1"
  ;;
*) fail "unknown test '$what'" ;;
esac
