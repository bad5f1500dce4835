#!/usr/bin/env bash
# Brings up a real two-node SLURM on this machine for the `multinode` slurm
# tests, installing slurm-wlm and munge if missing (as slurm-up.sh does).
# The compute nodes are network namespaces made by `nodes.sh up DIR/nodes 2`:
# wtslurm0 and wtslurm1, 10.231.1.11 and .12 on the bridge wtslurmbr (not
# the mpirun multinode tests' wtnode nodes on net 0, so both clusters can be
# up at once; WANTRAIN_SLURM_NODE_PREFIX and WANTRAIN_SLURM_NODE_NET choose
# others). Each node runs its own slurmd, started inside it (nodes.sh exec,
# slurmd -N NODE): the daemon, and every job step it starts, have that
# node's address, host name and local disk. slurmctld and munged run on this
# machine, the "head node", at the bridge address 10.231.1.1, which every
# node reaches; sbatch, squeue and scontrol from here talk to it there.
#
#   slurm-nodes-up.sh DIR     (default /tmp/wantrain-slurm-nodes); slurm-nodes-down.sh DIR stops it
#
# DIR gets slurm.conf, the daemons' PID files, state, spool directories,
# logs (DIR/log) and the nodes (DIR/nodes). Prints `export SLURM_CONF=...`.
# Whatever an earlier run left in DIR is stopped first. Needs root (network
# namespaces; slurmd runs jobs as their users); without it, it says so and
# exits 0, and the tests skip.
set -euo pipefail
dir=$(realpath -m "${1:-/tmp/wantrain-slurm-nodes}")  # the daemons run from /
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "slurm-nodes-up: not root, so no cluster is brought up (network namespaces, slurmd and munged need root); the multinode slurm tests will skip"
  exit 0
fi
# shellcheck source=slurm-common.sh
. "$here/slurm-common.sh"
slurm_install_packages

# Leftovers of an earlier run in DIR (daemons, jobs, namespaces) go first.
"$here/slurm-nodes-down.sh" "$dir" >/dev/null 2>&1 || true
# Not the mpirun multinode tests' nodes (nodes.sh's default wtnode, net 0).
export WANTRAIN_NODE_PREFIX=${WANTRAIN_SLURM_NODE_PREFIX:-wtslurm} WANTRAIN_NODE_NET=${WANTRAIN_SLURM_NODE_NET:-1}
# Nodes of this prefix up from another directory: nodes.sh removes them if
# the run that made them has exited, and refuses them if they are in use.
rm -rf "$dir"
mkdir -p "$dir"/{state,spool,munge,log}
chmod 700 "$dir/munge"

status=0
"$here/nodes.sh" up "$dir/nodes" 2 || status=$?
if [ "$status" -eq 77 ]; then
  echo "slurm-nodes-up: no nodes (see above), so no cluster is brought up; the multinode slurm tests will skip"
  exit 0
fi
[ "$status" -eq 0 ] || exit "$status"
# shellcheck disable=SC1091
. "$dir/nodes/nodes.env"  # NODES, HEAD_ADDR, INTERFACE
# shellcheck disable=SC2153
read -r -a nodes <<<"$NODES"

# munged with its own key, socket and PID file. Its socket is a file, and
# files are shared with the nodes, so the slurmds use this one munged.
slurm_start_munged "$dir"

# slurmctld's port: one the kernel says is free here now. Each slurmd has
# its node's network to itself, so the default port is free there.
ctld_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
slurmd_port=6818
# The nodes are this machine: its sockets, cores and threads (slurmd -C),
# and half its memory each.
hw=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //; s/ RealMemory=[0-9]*//')
mem=$(slurmd -C | head -1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
# slurmctld accepts SlurmctldHost only on the host of that name: this
# machine's, with the head address, which the nodes reach. The slurmds'
# spool, PID and log files are per node (%n). TmpFS is the node's local
# disk: /tmp is one directory for both nodes here, and a step's PMIx server
# makes its clients' directory, named by job and step, under TmpFS on each
# node. batch_sched_delay=0: a batch job starts within a second of sbatch, not 3 s.
host=$(hostname -s)
{
  cat <<CONF
# Written by tests/cluster/slurm-nodes-up.sh: a two-node cluster for the multinode slurm tests.
ClusterName=wantrain-nodes
SlurmctldHost=$host($HEAD_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/nodes/local
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=300
CONF
  for node in "${nodes[@]}"; do
    addr=$(ip -n "$node" -4 -o addr show dev "$INTERFACE" | awk '{ sub("/.*", "", $4); print $4 }')
    echo "NodeName=$node NodeAddr=$addr $hw RealMemory=$((mem / ${#nodes[@]})) State=UNKNOWN"
  done
  echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$dir/slurm.conf"
# slurmd loads a cgroup plugin even when no plugin above uses cgroups, and
# autodetecting one fails on a node: `ip netns exec` mounts the namespace's
# own /sys, without /sys/fs/cgroup. Named, the v1 plugin loads and is not used.
echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
export SLURM_CONF="$dir/slurm.conf"
/usr/sbin/slurmctld -f "$SLURM_CONF"
for node in "${nodes[@]}"; do
  mkdir -p "$dir/spool/$node"
  "$here/nodes.sh" exec "$dir/nodes" "$node" /usr/sbin/slurmd -f "$SLURM_CONF" -N "$node"
done

# Ready when both nodes are idle.
for _ in $(seq 60); do
  kill -0 "$(cat "$dir/slurmctld.pid" 2>/dev/null)" 2>/dev/null || {
    echo "slurm-nodes-up: slurmctld is not running; see $dir/log/slurmctld.log:" >&2; tail -5 "$dir/log/slurmctld.log" >&2; exit 1; }
  if [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -eq "${#nodes[@]}" ]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 1
done
echo "slurm-nodes-up: the nodes did not become idle in 60 s; logs in $dir/log" >&2
sinfo -N >&2 || true
exit 1
