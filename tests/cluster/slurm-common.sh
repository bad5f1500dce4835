# Sourced by slurm-up.sh, slurm-nodes-up.sh and the tests of both clusters:
# what they have in common. The job helpers call `fail`, which the tests define.

# slurm-wlm and munge, installed when missing.
slurm_install_packages() {
  local need=() p
  for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"
  fi
}

# munged with its own key, socket and PID file in DIR (DIR/munge, DIR/log
# exist): nothing of the system's is touched. Sets `socket`.
slurm_start_munged() {
  local dir=$1 key="$1/munge/munge.key"
  dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
  chmod 400 "$key"
  socket="$dir/munge/munge.socket"
  /usr/sbin/munged --key-file="$key" --socket="$socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed" --force
}

# For the sweep tests: array task I of the sweep file SWEEP ran in WORK/sweep/task-I,
# took line I of the file (comments and blank lines skipped), and its own
# learning rate reached wantrain (metrics.jsonl logs it). Prints why not, returns 1.
slurm_check_sweep_task() {
  local work=$1 sweep=$2 i=$3 dir line lr
  dir="$work/sweep/task-$i"
  [ -f "$dir/model.safetensors" ] || { echo "task $i: no $dir/model.safetensors"; return 1; }
  line=$(cat "$dir/sweep-line.txt")
  [ "$line" = "$(grep -v '^[[:space:]]*\(#\|$\)' "$sweep" | sed -n "$((i + 1))p")" ] \
    || { echo "task $i ran '$line', not line $i of the sweep file"; return 1; }
  lr=$(sed -n 's/^--lr \([^ ]*\).*/\1/p' <<<"$line")
  python3 -c "import json,sys; l=[json.loads(x) for x in open('$dir/metrics.jsonl') if '\"loss\"' in x]; sys.exit(0 if abs(l[-1]['lr']-float('$lr'))<1e-12 else 1)" \
    || { echo "task $i: metrics.jsonl does not show lr $lr of its line '$line'"; return 1; }
}

# A job's state, or nothing once it has ended (squeue forgets finished jobs).
# squeue failing for another reason (the controller busy under load) is asked
# again, not taken for the end: slurm.preempt once read a requeue as the end.
state() {
  local out
  for _ in 1 2 3 4 5 6; do
    if out=$(squeue -h -j "$1" -o %T 2>&1); then
      [ -z "$out" ] || sort -u <<<"$out" | tr '\n' ' '
      return 0
    fi
    grep -q "Invalid job id" <<<"$out" && return 0
    sleep 0.5
  done
}
wait_gone() {  # job id, seconds: polled, as sbatch --wait's back-off would add seconds
  for _ in $(seq $(($2 * 5))); do [ -z "$(state "$1")" ] && return 0; sleep 0.2; done
  fail "job $1 still $(state "$1") after $2 s"
}
# sbatch --wait, without its back-off (seconds after the job has ended):
# submits, waits until the job is gone, and fails unless every task exited 0.
sbatch_wait() {  # seconds, sbatch arguments...
  local seconds=$1 job
  shift
  job=$(sbatch --parsable "$@") || return 1
  wait_gone "$job" "$seconds"
  [ "$(exit_code "$job")" = "0:0 " ]
}
exit_code() { scontrol show job "$1" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' | sort -u | tr '\n' ' '; }

# SLURM holds a requeued job back for two minutes (its begin time) while
# slurmd finishes the old run. Once the old run's slurmstepd processes are
# gone, move the begin time to now until the job runs: one early update is
# not enough, as it is refused while the job is still completing.
#
# slurmd refuses to start the job again with a credential made in the same
# second as the one it revoked at the requeue ("Job credential revoked":
# slurmctld then kills the job; it compares whole seconds): 1.2 s after the
# old run is gone, the new start is in a later second. (With wantrain's
# quicker exit, the update once came 0.13 s after the requeue.)
slurm_start_requeued() {  # job id
  for _ in $(seq 240); do
    pgrep -f "slurmstepd: \[$1\." >/dev/null || break
    sleep 0.25
  done
  sleep 1.2
  local s
  for _ in $(seq 120); do
    s=$(state "$1")
    [ -z "$s" ] || [ "$s" = "RUNNING " ] && return 0
    [ "$s" != "PENDING " ] || scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 || true
    sleep 0.5
  done
}
