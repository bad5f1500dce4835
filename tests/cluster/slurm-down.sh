#!/usr/bin/env bash
# Stops the daemons that slurm-up.sh started in DIR, by their PID files.
set -uo pipefail
dir=$(realpath -m "${1:-/tmp/wantrain-slurm}")
for daemon in slurmd slurmctld munged; do
  pidfile="$dir/$daemon.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
done
