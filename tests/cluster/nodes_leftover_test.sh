#!/usr/bin/env bash
# nodes.sh up from one directory meets nodes of the same prefix up from
# another: refused while they are in use (the process that brought them up
# runs, or a process runs on a node), removed once they are only what a
# killed run left; and the first directory's `down` then leaves the new
# owner's nodes alone. Own prefix and net (wtleft, 10.231.2.0/24), so the
# multinode fixtures' nodes are never touched. Exit 77 without namespaces.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK_DIR:-/tmp/wantrain-cluster-tests}/nodes-leftover
export WANTRAIN_NODE_PREFIX=wtleft WANTRAIN_NODE_NET=2
fail() { echo "FAIL: $*" >&2; "$here/nodes.sh" down "$work/b" >/dev/null 2>&1; "$here/nodes.sh" down "$work/a" >/dev/null 2>&1; exit 1; }
rm -rf "$work" && mkdir -p "$work"

sleep 600 & owner=$!
out=$(WANTRAIN_NODES_OWNER=$owner "$here/nodes.sh" up "$work/a" 2 2>&1); status=$?
[ "$status" -eq 77 ] && { kill "$owner"; echo "$out"; exit 77; }
[ "$status" -eq 0 ] || fail "up a: status $status: $out"

# In use: the process that brought them up runs.
out=$("$here/nodes.sh" up "$work/b" 2 2>&1) && fail "up b took the nodes of a while its owner ran: $out"
grep -q "up from $work/a and in use (the process that brought them up, $owner, runs)" <<<"$out" || fail "up b, owner alive: $out"
kill "$owner"; wait "$owner" 2>/dev/null

# In use: a process runs on a node.
"$here/nodes.sh" exec "$work/a" wtleft1 sleep 600 & on_node=$!
for _ in $(seq 50); do [ -n "$(ip netns pids wtleft1)" ] && break; sleep 0.1; done
out=$("$here/nodes.sh" up "$work/b" 2 2>&1) && fail "up b took the nodes of a while a process ran on wtleft1: $out"
grep -q "in use (processes run on wtleft1)" <<<"$out" || fail "up b, process on a node: $out"
kill "$on_node"; wait "$on_node" 2>/dev/null
for _ in $(seq 50); do [ -z "$(ip netns pids wtleft1)" ] && break; sleep 0.1; done

# Left over: taken over, and working.
out=$("$here/nodes.sh" up "$work/b" 2 2>&1) || fail "up b over leftovers: $out"
grep -q "removing the nodes of prefix wtleft that a run which has exited left up (from $work/a)" <<<"$out" || fail "up b did not say what it removed: $out"
# A connection to a closed port is refused by the peer: the nodes reach each other.
out=$("$here/nodes.sh" exec "$work/b" wtleft0 bash -c 'exec 3<>/dev/tcp/wtleft1/9' 2>&1)
grep -q refused <<<"$out" || fail "wtleft0 does not reach wtleft1 after the takeover: $out"

# a's down leaves b's nodes; b's removes them.
"$here/nodes.sh" down "$work/a"
ip netns list | grep -q '^wtleft0\b' || fail "down a removed the nodes b now owns"
"$here/nodes.sh" down "$work/b"
! ip netns list | grep -q '^wtleft' || fail "down b left nodes: $(ip netns list)"
! ip link show wtleftbr >/dev/null 2>&1 || fail "down b left the bridge"
echo "PASS: leftovers are taken over, nodes in use are refused"
