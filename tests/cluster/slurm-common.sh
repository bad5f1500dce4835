# Sourced by slurm-up.sh and slurm-nodes-up.sh: what both clusters need.

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
