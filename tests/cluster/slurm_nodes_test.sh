#!/usr/bin/env bash
# The slurm/ scripts across the two nodes of slurm-nodes-up.sh (wtslurm0, wtslurm1):
#   slurm_nodes_test.sh train     sbatch --nodes=2 --ntasks-per-node=1 train.sbatch: one rank on
#                                 each node; final weights bitwise equal to a one-node
#                                 `mpirun -np 2` run of the same options. Its run is `preempt`'s reference.
#   slurm_nodes_test.sh preempt   scancel -s USR1 mid-run: both ranks checkpoint and exit 75, the
#                                 job requeues itself and resumes on two nodes; final weights
#                                 equal to `train`'s uninterrupted run's
#   slurm_nodes_test.sh sweep     a 2-task job array, --exclusive: the tasks run at the same time,
#                                 one on each node, each with its own line and output directory
# Environment (CTest sets it): SLURM_CONF, WANTRAIN, WANDATA, WANTRAIN_SOURCE_DIR, WORK_DIR.
# Exit 77 (skipped) when the two-node SLURM is not up.
set -euo pipefail
what=${1:?usage: slurm_nodes_test.sh train|preempt|sweep}
src=${WANTRAIN_SOURCE_DIR:?}
root=${WORK_DIR:-/tmp/wantrain-slurm-tests}
work=$root/nodes-$what
: "${WANTRAIN:?}" "${WANDATA:?}"
export WANTRAIN

# The nodes, wtslurm0 and wtslurm1 unless slurm-nodes-up.sh was told otherwise.
read -r -a nodes <<<"$( { [ -r "${SLURM_CONF:-/nonexistent}" ] && timeout 20 sinfo -h -N -o %N 2>/dev/null; } | sort -u | tr '\n' ' ')"
if [ ${#nodes[@]} -ne 2 ]; then
  echo "SKIP: the two-node SLURM is not up (tests/cluster/slurm-nodes-up.sh needs root, network namespaces and the slurm-wlm, munge packages)"
  exit 77
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=slurm-common.sh
. "$(dirname "$0")/slurm-common.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
# The straight run of `train` is `preempt`'s reference: the same data and options.
data=$root/nodes-train/data
common=(--model-config "$src/data/configs/wan-tiny.json" --data "$data" --batch-size 2 --threads 1
        --backend mpi --log-every 1 --seed 5 --lr 1e-3)
# Enough steps that scancel's USR1 lands mid-run (a two-node step takes
# 10-20 ms here, and the signal is sent after 20 steps).
steps=600

case "$what" in
train)
  "$WANDATA" synth --out "$data" --samples 32 --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 --seed 6 >/dev/null
  job=$(sbatch --parsable --chdir="$work" --nodes=2 --ntasks-per-node=1 --output="$work/straight-%j.out" \
    "$src/slurm/train.sbatch" "${common[@]}" --steps $steps --output-dir "$work/straight")
  wait_gone "$job" 120
  # The one-node reference, on this machine: 2 ranks, shared memory. Not
  # while the job runs: its ranks and these would share 2 cores, both slower.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
    mpirun -np 2 --oversubscribe "$WANTRAIN" "${common[@]}" --steps $steps --output-dir "$work/mpirun" \
    > "$work/mpirun.out" 2>&1 || { tail -20 "$work/mpirun.out"; fail "the one-node mpirun run failed"; }
  out=$(cat "$work/straight-$job.out")
  [ "$(exit_code "$job")" = "0:0 " ] || { echo "$out"; fail "job $job ended with exit code $(exit_code "$job")"; }
  grep -q "start on 2 node(s) (${nodes[0]%0}\[0-1\]), 2 task(s)" <<<"$out" || { echo "$out"; fail "not 2 tasks on ${nodes[0]%0}[0-1]"; }
  grep -q "world: 2 ranks" <<<"$out" || { echo "$out"; fail "not 2 ranks"; }
  # The world table: rank, host, local rank; one rank on each node.
  grep -Eq "\] +0 +${nodes[0]} +0/1 " <<<"$out" || { echo "$out"; fail "rank 0 is not on ${nodes[0]}"; }
  grep -Eq "\] +1 +${nodes[1]} +0/1 " <<<"$out" || { echo "$out"; fail "rank 1 is not on ${nodes[1]}"; }
  grep -q "trained $steps steps" <<<"$out" || { echo "$out"; fail "no $steps steps"; }
  grep -q "wantrain exited with status 0" <<<"$out" || { echo "$out"; fail "no clean exit line"; }
  grep -Eq "\] +1 +[^ ]+ +1/2 " "$work/mpirun.out" || { cat "$work/mpirun.out"; fail "the mpirun run's ranks are not both on one node"; }
  cmp "$work/straight/model.safetensors" "$work/mpirun/model.safetensors" \
    || fail "the two-node run's final weights differ from the one-node mpirun run's"
  echo "PASS: train.sbatch ran one rank on each of 2 nodes; final weights identical to a one-node mpirun -np 2 run"
  ;;
preempt)
  reference=$root/nodes-train/straight/model.safetensors
  [ -f "$reference" ] || fail "no $reference: slurm.nodes.train makes it (ctest runs it first, as this test's fixture)"
  job=$(sbatch --parsable --chdir="$work" --nodes=2 --ntasks-per-node=1 --output="$work/preempted-%j.out" \
    "$src/slurm/train.sbatch" "${common[@]}" --steps $steps --output-dir "$work/preempted")
  for _ in $(seq 600); do
    n=$(grep -c '"loss"' "$work/preempted/metrics.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 20 ] && break
    sleep 0.1
  done
  scancel -s USR1 "$job"
  for _ in $(seq 240); do
    scontrol show job "$job" 2>/dev/null | grep -q "Restarts=1" && break
    sleep 0.25
  done
  scontrol show job "$job" | grep -q "Restarts=1" || { cat "$work/preempted-$job.out"; fail "job $job was not requeued"; }
  slurm_start_requeued "$job"
  wait_gone "$job" 120
  out=$(cat "$work/preempted-$job.out")
  grep -q "stopping at step [0-9]* on SIGUSR1: checkpoint" <<<"$out" || { echo "$out"; fail "no checkpoint on USR1"; }
  stopped=$(sed -n 's/.*stopping at step \([0-9]*\) on SIGUSR1.*/\1/p' <<<"$out" | head -1)
  # Every rank wrote its part of the checkpoint (the resume line counts them)
  # and exited 75, each on its node: srun names every task that did not
  # exit 0. srun's --kill-on-bad-exit ends the step when the first rank's 75
  # arrives; the other is past the checkpoint's agreement by then, and has
  # always exited 75 here too, but a SIGKILL that wins that race is allowed.
  grep -Eq "\] resume: .*/step-0*$stopped\.h5 \(step $stopped, .*written by 2 ranks\)" <<<"$out" \
    || { echo "$out"; fail "the checkpoint of step $stopped was not written by both ranks"; }
  exits=$(sed -n 's/^srun: error: \([^:]*\): task \([01]\): \(.*\)/\1 \2 \3/p' <<<"$out")
  grep -qx "[^ ]* [01] Exited with exit code 75" <<<"$exits" || { echo "$out"; fail "no rank exited 75"; }
  for i in 0 1; do
    grep -Eqx "${nodes[$i]} $i (Exited with exit code 75|Killed)" <<<"$exits" \
      || { echo "$out"; fail "rank $i on ${nodes[$i]} did not exit 75"; }
  done
  [ "$(grep -c . <<<"$exits")" -eq 2 ] || { echo "$out"; fail "more task exits than the 2 ranks' one each before the requeue: $exits"; }
  grep -q "wantrain checkpointed (status 75): requeueing" <<<"$out" || { echo "$out"; fail "no requeue on status 75"; }
  grep -q "restart 1:" <<<"$out" || { echo "$out"; fail "the requeued job did not start again"; }
  grep -q "start on 2 node(s) (${nodes[0]%0}\[0-1\]), 2 task(s), restart 1" <<<"$out" || { echo "$out"; fail "the requeued job did not run on both nodes"; }
  grep -qF "] resume: $work/preempted/step-$(printf %08d "$stopped")" <<<"$out" || { echo "$out"; fail "the requeued job did not resume from step $stopped"; }
  grep -q "wantrain exited with status 0" <<<"$out" || { echo "$out"; fail "the requeued job did not finish"; }
  [ "$(exit_code "$job")" = "0:0 " ] || { echo "$out"; fail "job $job ended with exit code $(exit_code "$job")"; }
  cmp "$reference" "$work/preempted/model.safetensors" \
    || fail "the pre-empted run's final weights differ from the uninterrupted two-node run's"
  echo "PASS: two nodes: USR1 at step $stopped -> both ranks checkpoint, exit 75 -> requeue -> resume; final weights identical"
  ;;
sweep)
  "$WANDATA" synth --out data --samples 32 --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 --seed 6 >/dev/null
  printf '# two learning rates\n--lr 1e-4\n--lr 1e-3 --warmup-steps 1\n' > sweep.txt
  # --exclusive: a task takes a whole node, so the two run at once, one per node.
  job=$(WANTRAIN_SWEEP_DIR="$work/sweep" sbatch --parsable --chdir="$work" --array=0-1 --exclusive \
    --output="$work/sweep-%A_%a.out" "$src/slurm/sweep.sbatch" sweep.txt \
    --model-config "$src/data/configs/wan-tiny.json" --data "$work/data" --batch-size 2 --threads 1 \
    --backend mpi --log-every 1 --seed 5 --steps 20)
  wait_gone "$job" 120
  [ "$(exit_code "$job")" = "0:0 " ] || { cat "$work"/sweep-*.out; fail "array job $job: exit codes $(exit_code "$job")"; }
  hosts=()
  for i in 0 1; do
    out=$(cat "$work/sweep-${job}_$i.out")
    why=$(slurm_check_sweep_task "$work" sweep.txt "$i") || { echo "$out"; fail "$why"; }
    # The node it ran on: in srun-wantrain's start line and in wantrain's world table.
    host=$(sed -n 's/.* start on 1 node(s) (\([^)]*\)), 1 task(s).*/\1/p' <<<"$out")
    grep -Eq "\] +0 +$host +0/1 " <<<"$out" || { echo "$out"; fail "task $i: wantrain's world table does not name $host"; }
    hosts+=("$host")
  done
  [ "$(printf '%s\n' "${hosts[@]}" | sort | tr '\n' ' ')" = "${nodes[*]} " ] \
    || fail "the tasks ran on ${hosts[*]}, not one on each of ${nodes[*]}"
  # At the same time: each task started before the other ended (SLURM's times, to the second).
  times=$(scontrol show job "$job" | sed -n 's/.* StartTime=\([^ ]*\) EndTime=\([^ ]*\).*/\1 \2/p')
  python3 -c '
import sys, datetime
t = [[datetime.datetime.fromisoformat(x) for x in l.split()] for l in sys.argv[1].splitlines()]
sys.exit(0 if len(t) == 2 and t[0][0] <= t[1][1] and t[1][0] <= t[0][1] else 1)' "$times" \
    || fail "the two tasks did not run at the same time (start, end: $(tr '\n' ';' <<<"$times"))"
  echo "PASS: a 2-task array sweep ran one task on each node at the same time, each with its own line and output directory"
  ;;
*) fail "unknown test '$what'" ;;
esac
