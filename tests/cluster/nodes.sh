#!/usr/bin/env bash
# A cluster of N nodes on this machine, for the multinode tests: each node is
# a network namespace with its own address on a private bridge, its own host
# name (a UTS namespace per command), its own /etc/hosts naming every node,
# and its own "local disk" (DIR/nodes/NODE/local, bound over DIR/local in a
# mount namespace per command). Files elsewhere are shared, as on a cluster's
# parallel file system. Traffic between nodes is real TCP over veth pairs.
#
#   nodes.sh up DIR [N]        create N nodes (default 2); writes DIR/hostfile, DIR/rsh, DIR/nodes.env
#   nodes.sh exec DIR NODE CMD...   run CMD on NODE (as `ssh NODE CMD` would)
#   nodes.sh down DIR          kill what runs on the nodes, remove them (also after a crash)
#
# DIR/rsh is the agent for Open MPI (--mca plm_rsh_agent DIR/rsh): mpirun,
# run on one node, starts its daemons on the others through it, as through ssh.
# Nodes up from another directory are removed first if the process that
# brought them up (the ctest run, else the caller, or $WANTRAIN_NODES_OWNER)
# has exited and nothing runs on them: what a killed run left. Otherwise
# `up` refuses them in one line.
# Node names are PREFIX0..PREFIX{N-1}, PREFIX from $WANTRAIN_NODE_PREFIX
# (default wtnode); addresses 10.231.$WANTRAIN_NODE_NET.{11+i} (default net 0),
# the bridge (this machine, the "head node") .1. Needs root with CAP_SYS_ADMIN
# and CAP_NET_ADMIN; otherwise `up` exits 77 (skipped) saying why.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
what=${1:?usage: nodes.sh up|exec|down DIR ...}
dir=$(realpath -m "${2:?usage: nodes.sh $what DIR ...}")
shift 2

load() {
  [ -r "$dir/nodes.env" ] || { echo "nodes.sh: no cluster in $dir (nodes.sh up $dir first)" >&2; exit 2; }
  # shellcheck disable=SC1091
  . "$dir/nodes.env"
}

node_exec() {  # node, command... : the command as a login shell of that node would run it
  local node=$1; shift
  [ -d "$dir/nodes/$node" ] || { echo "nodes.sh: $node is not a node of $dir (nodes: $NODES)" >&2; exit 2; }
  # A private mount namespace binds the node's local disk; a UTS namespace names the host.
  exec ip netns exec "$node" unshare --uts --mount --propagation private \
    bash -c 'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"' node-exec \
    "$node" "$dir/nodes/$node/local" "$dir/local" "$@"
}

# Who brought a bridge's nodes up: /run/wantrain-nodes/BRIDGE holds the
# directory and the process that owns them (the ctest run, else the caller),
# so that another directory's `up` can tell a live cluster from one a killed
# run left behind (/run, like the namespaces, is gone after a reboot).
owner_file() { echo "/run/wantrain-nodes/$1"; }

owner_process() {  # $WANTRAIN_NODES_OWNER, else the nearest ctest above us, else our caller: "PID STARTTIME"
  local pid=${WANTRAIN_NODES_OWNER:-$PPID} parent
  if [ -n "${WANTRAIN_NODES_OWNER:-}" ]; then
    echo "$pid $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)"; return
  fi
  while [ "$pid" -gt 1 ] && [ -r "/proc/$pid/stat" ]; do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = ctest ]; then break; fi
    parent=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f2)
    [ "$parent" -gt 1 ] || { pid=$PPID; break; }
    pid=$parent
  done
  [ -r "/proc/$pid/stat" ] || pid=$PPID
  echo "$pid $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)"
}

process_alive() {  # PID STARTTIME: the same process (not a reused PID) still runs
  [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f20)" = "$2" ]
}

prefix_nodes() {  # the namespaces named PREFIX0, PREFIX1, ...
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1[0-9]+\$" || true
}

# A cluster of this prefix up from another directory is a leftover when the
# process that owned it has exited and nothing runs on its nodes: removed.
# One in use (its owner alive, or processes on a node) is refused.
take_over_leftover() {  # prefix bridge
  local prefix=$1 bridge=$2 owner="" owner_dir="(unknown)" pid="" start="" node busy=""
  if [ -r "$(owner_file "$bridge")" ]; then
    owner=$(cat "$(owner_file "$bridge")")
    owner_dir=${owner#* * }
    pid=${owner%% *}; start=${owner#* }; start=${start%% *}
  fi
  for node in $(prefix_nodes "$prefix"); do
    [ -z "$(ip netns pids "$node" 2>/dev/null)" ] || busy+="${busy:+, }$node"
  done
  local use=""
  if [ -n "$busy" ]; then use="processes run on $busy"
  elif [ -n "$pid" ] && [ "$pid" -gt 1 ] && process_alive "$pid" "$start"; then use="the process that brought them up, $pid, runs"; fi
  if [ -n "$use" ]; then
    echo "nodes.sh: nodes of prefix $prefix are up from $owner_dir and in use ($use): nodes.sh down that directory, or set WANTRAIN_NODE_PREFIX and WANTRAIN_NODE_NET" >&2
    return 1
  fi
  echo "nodes.sh: removing the nodes of prefix $prefix that a run which has exited left up (from $owner_dir)" >&2
  for node in $(prefix_nodes "$prefix"); do
    ip netns delete "$node" 2>/dev/null || true
    ip link delete "veth-$node" 2>/dev/null || true
    rm -rf "/etc/netns/$node"
  done
  ip link delete "$bridge" 2>/dev/null || true
  rm -f "$(owner_file "$bridge")"
}

down() {
  [ -r "$dir/nodes.env" ] || return 0
  load
  # Nodes another directory has since taken over are not ours to remove.
  if [ -r "$(owner_file "$BRIDGE")" ] && [ "$(cut -d' ' -f3- "$(owner_file "$BRIDGE")")" != "$dir" ]; then
    rm -f "$dir/nodes.env"; return 0
  fi
  for node in $NODES; do
    if ip netns pids "$node" >/dev/null 2>&1; then
      # Everything running on the node, daemons included, then the namespace.
      for _ in 1 2 3; do
        pids=$(ip netns pids "$node" 2>/dev/null || true)
        [ -n "$pids" ] || break
        kill -9 $pids 2>/dev/null || true
        sleep 0.2
      done
      ip netns delete "$node" 2>/dev/null || true
    fi
    ip link delete "veth-$node" 2>/dev/null || true
    rm -rf "/etc/netns/$node"
  done
  ip link delete "$BRIDGE" 2>/dev/null || true
  rm -f "$(owner_file "$BRIDGE")" "$dir/nodes.env"
}

case "$what" in
up)
  count=${1:-2}
  if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: the multinode tests need root (network namespaces, veth pairs and a bridge)"; exit 77
  fi
  if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    echo "SKIP: the multinode tests need ip (iproute2) and unshare (util-linux)"; exit 77
  fi
  if ! unshare --net --uts --mount true 2>/dev/null; then
    echo "SKIP: cannot make network, UTS and mount namespaces here (unshare): the multinode tests need CAP_SYS_ADMIN"; exit 77
  fi
  prefix=${WANTRAIN_NODE_PREFIX:-wtnode}
  net=${WANTRAIN_NODE_NET:-0}
  # Left over from a run that was killed: gone first.
  down || true
  mkdir -p "$dir/local"
  nodes=""
  for i in $(seq 0 $((count - 1))); do nodes+="${nodes:+ }$prefix$i"; done
  # A failure from here on leaves nothing half made.
  trap 'echo "nodes.sh: bringing up the nodes failed; removing what was made" >&2; down' ERR
  cat > "$dir/nodes.env" <<ENV
NODES="$nodes"
BRIDGE=${prefix}br
HEAD_ADDR=10.231.$net.1
SUBNET=10.231.$net.0/24
INTERFACE=eth0
ENV
  load
  if ip link show "$BRIDGE" >/dev/null 2>&1 || [ -n "$(prefix_nodes "$prefix")" ]; then
    take_over_leftover "$prefix" "$BRIDGE" || { rm -f "$dir/nodes.env"; exit 1; }
  fi
  if ! ip link add "$BRIDGE" type bridge 2>"$dir/ip.err"; then
    echo "SKIP: cannot create a network bridge here ($(head -1 "$dir/ip.err")): the multinode tests need CAP_NET_ADMIN"
    rm -f "$dir/nodes.env"; exit 77
  fi
  mkdir -p /run/wantrain-nodes
  echo "$(owner_process) $dir" > "$(owner_file "$BRIDGE")"
  ip addr add "$HEAD_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  hosts="127.0.0.1 localhost"$'\n'"$HEAD_ADDR head"$'\n'
  i=0
  for node in $NODES; do hosts+="10.231.$net.$((11 + i)) $node"$'\n'; i=$((i + 1)); done
  : > "$dir/hostfile"
  i=0
  for node in $NODES; do
    ip netns add "$node"
    ip link add "veth-$node" type veth peer name eth0 netns "$node"
    ip link set "veth-$node" master "$BRIDGE" up
    ip -n "$node" addr add "10.231.$net.$((11 + i))/24" dev eth0
    ip -n "$node" link set eth0 up
    ip -n "$node" link set lo up
    # `ip netns exec` binds /etc/netns/NODE/hosts over /etc/hosts.
    mkdir -p "/etc/netns/$node" "$dir/nodes/$node/local"
    printf '%s' "$hosts" > "/etc/netns/$node/hosts"
    echo "$node slots=2" >> "$dir/hostfile"
    i=$((i + 1))
  done
  cat > "$dir/rsh" <<RSH
#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the nodes of $dir: rsh NODE COMMAND...
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done  # ssh-style options: none apply
node=\$1; shift
exec "$here/nodes.sh" exec "$dir" "\$node" bash -c "\$*"
RSH
  chmod +x "$dir/rsh"
  # Every node reaches every other by name: a TCP connection to a closed
  # port is refused by the peer (a missing route would time out instead).
  for node in $NODES; do
    for peer in $NODES head; do
      err=$(ip netns exec "$node" timeout 5 bash -c "exec 3<>/dev/tcp/$peer/9" 2>&1 || true)
      if ! grep -q "refused" <<<"$err"; then
        # The host's, not ours: e.g. a firewall on bridged traffic (net.bridge.bridge-nf-call-iptables).
        trap - ERR
        down
        echo "SKIP: node $node cannot reach $peer over the bridge here (${err:-no answer}): a firewall on bridged traffic?"
        exit 77
      fi
    done
  done
  trap - ERR
  echo "nodes: $NODES on $BRIDGE ($SUBNET); hostfile $dir/hostfile; rsh agent $dir/rsh"
  ;;
exec)
  load
  node_exec "$@"
  ;;
down)
  down
  ;;
*)
  echo "nodes.sh: unknown command '$what' (up, exec, down)" >&2; exit 2 ;;
esac
