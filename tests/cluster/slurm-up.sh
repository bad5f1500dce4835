#!/usr/bin/env bash
# Brings up a real single-node SLURM on this machine for the `slurm` tests:
# installs slurm-wlm and munge if missing, writes a slurm.conf under DIR
# (default /tmp/wantrain-slurm) with the node line from `slurmd -C`, and
# starts munged, slurmctld and slurmd, remembering their PIDs in DIR so
# that slurm-down.sh stops exactly these. Prints `export SLURM_CONF=...`.
# Needs root (slurmd runs jobs as their users).
set -euo pipefail
dir=$(realpath -m "${1:-/tmp/wantrain-slurm}")  # the daemons run from /
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" -ne 0 ]; then echo "slurm-up: not root, so no cluster is brought up (slurmd and munged need root); the slurm tests will skip"; exit 0; fi
# shellcheck source=slurm-common.sh
. "$here/slurm-common.sh"
slurm_install_packages

"$here/slurm-down.sh" "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
mkdir -p "$dir"/{state,spool,munge,log}
chmod 700 "$dir/munge"

# munged with its own key, socket and PID file: nothing of the system's is touched.
slurm_start_munged "$dir"

# Ports the kernel says are free now, so that another SLURM (a system one,
# or a parallel test run) is never in the way.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
node=$(slurmd -C | head -1)
host=$(hostname -s)
cat > "$dir/slurm.conf" <<CONF
# Written by tests/cluster/slurm-up.sh: a one-node cluster for the slurm tests.
ClusterName=wantrain-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
# A batch job starts within a second, not after up to 3 s (the tests submit many short jobs).
SchedulerParameters=batch_sched_delay=0
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=300
$node State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF="$dir/slurm.conf"
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"

# Ready when the node is idle.
for _ in $(seq 60); do
  kill -0 "$(cat "$dir/slurmctld.pid" 2>/dev/null)" 2>/dev/null || {
    echo "slurm-up: slurmctld is not running; see $dir/log/slurmctld.log:" >&2; tail -5 "$dir/log/slurmctld.log" >&2; exit 1; }
  if sinfo -h -o '%T' 2>/dev/null | grep -q '^idle'; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 1
done
echo "slurm-up: the node did not become idle in 60 s; logs in $dir/log" >&2
sinfo >&2 || true
exit 1
