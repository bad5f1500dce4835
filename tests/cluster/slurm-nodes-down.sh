#!/usr/bin/env bash
# Stops the two-node SLURM that slurm-nodes-up.sh started in DIR: the
# slurmds and slurmctld by their PID files (all at once), then munged, then
# whatever still runs on the nodes (job steps included) and the nodes
# themselves (nodes.sh down). Also cleans up after a run killed half-way.
set -uo pipefail
dir=$(realpath -m "${1:-/tmp/wantrain-slurm-nodes}")
here=$(cd "$(dirname "$0")" && pwd)
stop() {  # PID files: TERM, up to 10 s to exit, then KILL
  local pids=() pidfile pid alive
  for pidfile in "$@"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    rm -f "$pidfile"
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 1 ] || return 0
    sleep 0.2
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}
stop "$dir"/slurmd-*.pid "$dir/slurmctld.pid"
stop "$dir/munged.pid"
"$here/nodes.sh" down "$dir/nodes"
