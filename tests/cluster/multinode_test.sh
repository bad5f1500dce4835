#!/usr/bin/env bash
# wantrain on two nodes of nodes.sh (network namespaces: real TCP between
# them, their own host names and local disks), launched from the first node
# by mpi/wanrun with a hostfile, as on a cluster:
#   multinode_test.sh equal        2 nodes x 1 and x 2 ranks equal 1 node with the same world, bit for bit
#   multinode_test.sh checkpoints  who writes what (--zero 1), and a resume on another node count
#   multinode_test.sh local-data   node-local shards with --shard-affinity (wandata stage) equal shared storage
#   multinode_test.sh lost-node    a node cut off mid-run: one line naming it, the job ends, --resume auto finishes
# Environment (CTest sets it): NODES_DIR (nodes.sh up NODES_DIR 2 ran), WANTRAIN, WANDATA,
# WANTRAIN_SOURCE_DIR, WORK_DIR. Exit 77 (skipped) when no nodes are up.
set -euo pipefail
what=${1:?usage: multinode_test.sh equal|checkpoints|local-data|lost-node}
src=${WANTRAIN_SOURCE_DIR:?}
nodes_dir=${NODES_DIR:?}
: "${WANTRAIN:?}" "${WANDATA:?}"
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -r "$nodes_dir/nodes.env" ]; then
  echo "SKIP: no nodes are up (tests/cluster/nodes.sh up needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN)"
  exit 77
fi
# shellcheck disable=SC1091
. "$nodes_dir/nodes.env"
read -r node0 node1 _ <<<"$NODES"
work=${WORK_DIR:-/tmp/wantrain-cluster-tests}/multinode-$what
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
python=/usr/bin/python3

on() { "$here/nodes.sh" exec "$nodes_dir" "$@"; }  # on NODE COMMAND...: as ssh NODE would
# wanrun from the first node: over the hostfile's nodes, or on that node alone with --here.
launch() {
  local placement=(--hostfile "$nodes_dir/hostfile" --mca plm_rsh_agent "$nodes_dir/rsh" --interface "$INTERFACE")
  if [ "$1" = "--here" ]; then placement=(); shift; fi
  on "$node0" "$src/mpi/wanrun" --wantrain "$WANTRAIN" "${placement[@]}" "$@"
}
common=(--model-config "$src/data/configs/wan-tiny.json" --batch-size 2 --threads 1 --log-every 1 --seed 3 --lr 1e-3)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }
same_run() {  # run dir, run dir: the same losses and final weights, bit for bit
  [ "$(losses "$1/metrics.jsonl")" = "$(losses "$2/metrics.jsonl")" ] || fail "losses of $1 and $2 differ"
  cmp "$1/model.safetensors" "$2/model.safetensors" || fail "final weights of $1 and $2 differ"
}
refused() {  # expected line, wantrain options: a 2-node run that must end with that line and status 2
  local line=$1 out status; shift
  set +e
  out=$(launch --ranks-per-node 1 -- "${common[@]}" --steps 8 --output-dir "$work/refused" "$@" 2>&1)
  status=$?
  set -e
  [ "$status" -eq 2 ] || { echo "$out"; fail "$*: status $status, expected 2"; }
  grep -qF -- "$line" <<<"$out" || { echo "$out"; fail "$*: no line '$line'"; }
}
"$WANDATA" synth --out data --samples 32 --shards 4 --frames 1 --size 8x8 --text-len 16 --text-dim 64 --seed 6 >/dev/null

case "$what" in
equal)
  for per_node in 1 2; do
    world=$((2 * per_node))
    launch --here --ranks-per-node "$world" -- "${common[@]}" --data "$work/data" --steps 8 --output-dir "$work/one-$world" \
      > "one-$world.log" 2>&1 || { cat "one-$world.log"; fail "1 node x $world ranks failed"; }
    launch --ranks-per-node "$per_node" -- "${common[@]}" --data "$work/data" --steps 8 --output-dir "$work/two-$world" \
      > "two-$world.log" 2>&1 || { cat "two-$world.log"; fail "2 nodes x $per_node ranks failed"; }
    out=$(cat "two-$world.log")
    grep -q "wanrun: $world rank(s): 2 node(s) x $per_node" <<<"$out" || { echo "$out"; fail "wanrun did not place 2 x $per_node"; }
    # The world table: rank, host, local rank / ranks on that host.
    for r in $(seq 0 $((world - 1))); do
      node=$([ "$r" -lt "$per_node" ] && echo "$node0" || echo "$node1")
      grep -qE "\] +$r +$node +$((r % per_node))/$per_node " <<<"$out" \
        || { echo "$out"; fail "rank $r is not local rank $((r % per_node))/$per_node on $node"; }
    done
    same_run "one-$world" "two-$world"
  done
  echo "PASS: 2 nodes x 1 and x 2 ranks equal 1 node x 2 and x 4, bit for bit; each node's ranks see their own host and local ranks"
  ;;
checkpoints)
  # --zero 1: rank 0 writes the main file, every rank its shard, each on its own node.
  launch --ranks-per-node 1 -- "${common[@]}" --data "$work/data" --steps 8 --save-every 4 --keep 5 --zero 1 \
    --output-dir "$work/straight" > straight.log 2>&1 || { cat straight.log; fail "the 2-node --zero 1 run failed"; }
  $python - "$work/straight" "$node0" "$node1" <<'PY' || fail "checkpoint files were not written by the expected nodes"
import h5py, sys
run, node0, node1 = sys.argv[1:]
for step in (4, 8):
    main = f"{run}/step-{step:08d}.h5"
    assert h5py.File(main)["/"].attrs["host"] == node0, main
    for r, node in enumerate((node0, node1)):
        shard = f"{run}/step-{step:08d}.zero-{r}-of-2.h5"
        host = h5py.File(shard)["/"].attrs["host"]
        assert host == node, f"{shard} written on {host}, not {node}"
PY
  # Stopped at step 4 on 2 nodes, resumed on 1 node with the same ranks: the same run.
  launch --ranks-per-node 1 -- "${common[@]}" --data "$work/data" --steps 4 --zero 1 --output-dir "$work/moved" \
    > first.log 2>&1 || { cat first.log; fail "the first half failed"; }
  launch --here --ranks-per-node 2 -- "${common[@]}" --data "$work/data" --steps 8 --zero 1 --output-dir "$work/moved" \
    --resume auto > second.log 2>&1 || { cat second.log; fail "the resume on one node failed"; }
  grep -q "resume: $work/moved/step-00000004" second.log || { cat second.log; fail "no resume from step 4"; }
  grep -qE "\] +1 +$node0 +1/2 " second.log || { cat second.log; fail "the resume did not run both ranks on $node0"; }
  cmp "$work/straight/model.safetensors" "$work/moved/model.safetensors" \
    || fail "the run resumed on 1 node differs from the uninterrupted 2-node run"
  echo "PASS: rank 0 writes the checkpoint on $node0 and each rank its --zero 1 shard on its node; a resume on 1 node continues bit for bit"
  ;;
local-data)
  # Each node's own shards on its local disk ($nodes_dir/local is a different disk on each node).
  rm -rf "$nodes_dir"/nodes/*/local/ds
  for i in 0 1; do
    node=$([ "$i" -eq 0 ] && echo "$node0" || echo "$node1")
    on "$node" "$WANDATA" stage "$work/data" --out "$nodes_dir/local/ds" --ranks 2 --node "$i" > "stage-$i.log" \
      || { cat "stage-$i.log"; fail "wandata stage on $node failed"; }
    grep -q "copied 2 of the 4 shards" "stage-$i.log" || { cat "stage-$i.log"; fail "$node did not get its 2 shards"; }
  done
  [ "$(cd "$nodes_dir/nodes/$node0/local/ds" && echo *.h5)" = "shard-00000.h5 shard-00002.h5" ] || fail "$node0 holds the wrong shards"
  launch --ranks-per-node 1 -- "${common[@]}" --data "$nodes_dir/local/ds" --shard-affinity --steps 8 \
    --output-dir "$work/local" > local.log 2>&1 || { cat local.log; fail "the node-local run failed"; }
  grep -q "4 shards, 32 samples" local.log || { cat local.log; fail "the job does not see all 4 shards"; }
  launch --ranks-per-node 1 -- "${common[@]}" --data "$work/data" --shard-affinity --steps 8 \
    --output-dir "$work/shared" > shared.log 2>&1 || { cat shared.log; fail "the shared-storage run failed"; }
  same_run local shared
  # Without --shard-affinity every rank needs every shard: one line naming the rank, its node and a missing shard.
  refused "error: data: rank 0 on $node0 lacks shard-00001.h5 of $nodes_dir/local/ds, which its staged-shards.txt lists" \
    --data "$nodes_dir/local/ds"
  # A shard that never reached its node (stage's list names it): the line names the rank, the node and the shard.
  rm "$nodes_dir/nodes/$node1/local/ds/shard-00003.h5"
  refused "error: data: with --shard-affinity rank 1 on $node1 reads shards 1, 3, ... of the 4 that the nodes hold in $nodes_dir/local/ds together, but shard 3 (shard-00003.h5) is not there" \
    --data "$nodes_dir/local/ds" --shard-affinity
  # The list is names of files there, nothing else.
  echo "../../elsewhere.h5" >> "$nodes_dir/nodes/$node1/local/ds/staged-shards.txt"
  refused "error: data: $nodes_dir/local/ds/staged-shards.txt: '../../elsewhere.h5' is not a shard's file name (NAME.h5) (on rank 1 on $node1)" \
    --data "$nodes_dir/local/ds" --shard-affinity
  echo "PASS: node-local shards staged by wandata stage train as shared storage does with --shard-affinity; without it, one line"
  ;;
lost-node)
  # wantrain's collectives give up after --comm-timeout (here before Open
  # MPI's keepalive probes notice the node); mpirun, waiting on the lost
  # node's daemon for ever, is ended by wanrun --abort-grace seconds later.
  launch --ranks-per-node 1 --abort-grace 5 -- "${common[@]}" --data "$work/data" --steps 1000 --save-every 100 \
    --comm-timeout 5 --output-dir "$work/run" > run.log 2>&1 &
  job=$!
  # Whatever happens, the job goes and the nodes come back for the other tests.
  trap 'kill "$job" 2>/dev/null; "$here/nodes.sh" up "$nodes_dir" 2 >/dev/null' EXIT
  for _ in $(seq 300); do [ -e "$work/run/step-00000200.h5" ] && break; sleep 0.1; done
  [ -e "$work/run/step-00000200.h5" ] || { cat run.log; fail "no checkpoint at step 200"; }
  cut=$(date +%s)
  ip link delete "veth-$node1"  # node1 drops off the network
  set +e
  wait "$job"
  status=$?
  set -e
  took=$(( $(date +%s) - cut ))
  [ "$status" -eq 1 ] || { cat run.log; fail "the job ended with status $status, not 1"; }
  [ "$took" -le 30 ] || { cat run.log; fail "the job took $took s to end after the cut"; }
  grep -q "wanrun: the job ended (MPI .*), but mpirun did not exit within 5 s (a node it cannot reach?): ending it" run.log \
    || { cat run.log; fail "wanrun did not end mpirun"; }
  grep -q "error: MPI .* did not complete within 5 s (--comm-timeout): no answer to a roll call within 1 s from rank 1 on $node1: it has exited, been stopped, or lost its node" run.log \
    || { cat run.log; fail "no line naming $node1"; }
  # latest is a whole checkpoint; the network back, --resume auto finishes the run.
  latest=$(readlink -f "$work/run/latest")
  "$WANTRAIN" export --checkpoint "$work/run/latest" --out "$work/latest.safetensors" >/dev/null \
    || fail "latest ($latest) does not load"
  "$here/nodes.sh" up "$nodes_dir" 2 >/dev/null
  trap - EXIT
  launch --ranks-per-node 1 -- "${common[@]}" --data "$work/data" --steps 1000 --save-every 100 \
    --comm-timeout 5 --output-dir "$work/run" --resume auto > resume.log 2>&1 || { cat resume.log; fail "the resume failed"; }
  grep -q "resume: $latest" resume.log || { cat resume.log; fail "the resume did not start from $latest"; }
  grep -q "step 1000/1000 " resume.log || { cat resume.log; fail "the resumed run did not finish"; }
  echo "PASS: a node cut off mid-run ends the job in $took s with one line naming $node1; latest loads; --resume auto finishes"
  ;;
*) fail "unknown test '$what'" ;;
esac
