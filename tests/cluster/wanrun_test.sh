#!/usr/bin/env bash
# mpi/wanrun: the command it builds (--print) for one node, a hostfile, a
# rankfile, the NCCL environment and wantrain's options; its one-line errors;
# and a real 2-rank wantrain run through it with an MCA parameter file.
# Environment (CTest sets it): WANTRAIN, WANDATA, WANTRAIN_SOURCE_DIR, WORK_DIR.
set -euo pipefail
src=${WANTRAIN_SOURCE_DIR:?}
wanrun="$src/mpi/wanrun"
work=${WORK_DIR:-/tmp/wantrain-cluster-tests}/wanrun
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # text, what it must contain
  grep -qF -- "$2" <<<"$1" || fail "expected '$2' in: $1"
}
reject() {  # text, what it must not contain
  ! grep -qF -- "$2" <<<"$1" || fail "did not expect '$2' in: $1"
}

# One node, 2 ranks: the NCCL variables set here reach every rank; wantrain's options come last.
out=$(NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo "$wanrun" --print --wantrain "$WANTRAIN" --ranks-per-node 2 -- --steps 3 --lr 1e-3)
expect "$out" "mpirun -np 2 "
expect "$out" "-x NCCL_DEBUG"
expect "$out" "-x NCCL_SOCKET_IFNAME"
expect "$out" "--bind-to core"
expect "$out" "$WANTRAIN --steps 3 --lr 1e-3"
expect "$out" "OMPI_MCA_mca_base_param_files="
expect "$out" "$src/mpi/mca-params.conf"
# Options wanrun does not know go to wantrain even without --.
out=$("$wanrun" --print --wantrain "$WANTRAIN" --config run.ini --precision bf16)
expect "$out" "$WANTRAIN --config run.ini --precision bf16"
expect "$out" "mpirun -np 1 "

# A hostfile of 2 nodes (comments skipped) with 4 ranks each; the first node only.
printf '# two nodes\nnode001 slots=4\n\nnode002 slots=4\n' > hosts
out=$("$wanrun" --print --wantrain "$WANTRAIN" --hostfile hosts --ranks-per-node 4 -x MY_VAR=1)
expect "$out" "mpirun -np 8 --hostfile hosts --map-by ppr:4:node"
expect "$out" "-x MY_VAR=1"
reject "$out" "--npernode"
out=$("$wanrun" --print --wantrain "$WANTRAIN" --hostfile hosts --nodes 1 --ranks-per-node 4)
expect "$out" "mpirun -np 4 --hostfile hosts --map-by ppr:4:node"
# A rankfile replaces mapping and binding, and sets the rank count.
printf 'rank 0=node001 slot=0:0\nrank 1=node001 slot=0:1\nrank 2=node002 slot=0:0\n' > ranks
out=$("$wanrun" --print --wantrain "$WANTRAIN" --hostfile hosts --rankfile ranks --mca btl_tcp_if_include lo)
expect "$out" "mpirun -np 3 --hostfile hosts --rankfile ranks"
expect "$out" "--mca btl_tcp_if_include lo"
reject "$out" "--map-by"
# One network for MPI, its daemons and NCCL; a NCCL_SOCKET_IFNAME of the user's stays.
out=$("$wanrun" --print --wantrain "$WANTRAIN" --hostfile hosts --interface ib0)
expect "$out" "--mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0"
expect "$out" "-x NCCL_SOCKET_IFNAME"
out=$(NCCL_SOCKET_IFNAME=eth1 "$wanrun" --print --wantrain "$WANTRAIN" --interface ib0 -x SHOW=1 -- sh -c 'true')
expect "$out" "-x NCCL_SOCKET_IFNAME"
# The GPUs the ranks will see: CUDA_VISIBLE_DEVICES, not the node's.
out=$(CUDA_VISIBLE_DEVICES=0,3 "$wanrun" --print --wantrain "$WANTRAIN")
expect "$out" "mpirun -np 2 "
expect "$out" "-x CUDA_VISIBLE_DEVICES"

# Bad options: one line naming the option, status 2.
check_error() {  # expected line, wanrun arguments...
  local line=$1; shift
  set +e
  err=$("$wanrun" --print --wantrain "$WANTRAIN" "$@" 2>&1)
  status=$?
  set -e
  [ "$status" -eq 2 ] || fail "wanrun $*: status $status, expected 2 ($err)"
  [ "$err" = "$line" ] || fail "wanrun $*: said '$err', expected '$line'"
}
check_error "wanrun: option --ranks-per-node: 'two' is not a positive whole number" --ranks-per-node two
check_error "wanrun: option --hostfile: cannot read missing-hosts" --hostfile missing-hosts
check_error "wanrun: option --nodes: 3 nodes asked for, but hosts has 2" --hostfile hosts --nodes 3
printf '# no node\n' > empty-hosts
check_error "wanrun: option --hostfile: empty-hosts names no node" --hostfile empty-hosts
check_error "wanrun: option --wantrain: /nonexistent is not an executable" --wantrain /nonexistent
check_error "wanrun: option --mca-params: cannot read nope.conf" --mca-params nope.conf
check_error "wanrun: option --interface: 'eth0;rm' is not an interface name" --interface 'eth0;rm' 

# A real run: 2 ranks of wan-tiny, with an MCA parameter file whose setting Open MPI reports.
"$WANDATA" synth --out data --samples 16 --shards 2 --frames 1 --size 8x8 --text-len 16 --text-dim 64 >/dev/null
printf 'mpi_show_mca_params = file\n' > show.conf
out=$("$wanrun" --wantrain "$WANTRAIN" --ranks-per-node 2 --mca-params show.conf -- \
      --model-config "$src/data/configs/wan-tiny.json" --data data --steps 3 --batch-size 2 --threads 1 \
      --output-dir run --log-every 1 2>&1) || { echo "$out"; fail "the run through wanrun failed"; }
expect "$out" "wanrun: 2 rank(s): 1 node(s) x 2"
expect "$out" "world: 2 ranks"
expect "$out" "mpi_show_mca_params=file"
expect "$out" "trained 3 steps"
[ -f run/model.safetensors ] || fail "no run/model.safetensors"

# The same through a hostfile, and through a rankfile, really launched (this node as localhost).
printf 'localhost slots=2\n' > local-hosts
printf 'rank 0=localhost slot=0\nrank 1=localhost slot=1\n' > local-ranks
for placement in "--hostfile local-hosts --ranks-per-node 2" "--hostfile local-hosts --rankfile local-ranks"; do
  # shellcheck disable=SC2086
  out=$("$wanrun" --wantrain "$WANTRAIN" $placement -- --model-config "$src/data/configs/wan-tiny.json" \
        --data data --dry-run 2>&1) || { echo "$out"; fail "wanrun $placement failed"; }
  expect "$out" "world: 2 ranks"
done
echo "PASS: wanrun builds the mpirun command, refuses bad options, and runs wantrain on 2 ranks"
