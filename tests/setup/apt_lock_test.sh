#!/usr/bin/env bash
# scripts/install-deps.sh on a machine whose package lock another process
# holds (a fresh cloud machine's unattended upgrades): its apt-get waits,
# says so once, and goes on when the lock is free; held too long, it stops
# with one line naming the lock and its holder. The holder here is a Python
# process taking the same fcntl locks apt takes. Root only (apt's locks),
# else skipped (77).
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "apt_lock_test: skipped: apt's locks need root"; exit 77; }
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
apt_waiting=$source_dir/scripts/apt-get-waiting.sh
work=$(mktemp -d)
holder=
cleanup() {
  [ -z "$holder" ] || kill "$holder" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Holds the given lock files for $1 seconds; prints "holding" once it has them.
hold() {
  local seconds=$1
  shift
  python3 - "$seconds" "$@" >"$work/holder.out" <<'PY' &
import fcntl, os, sys, time
fds = []
for path in sys.argv[2:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("holding", flush=True)
time.sleep(float(sys.argv[1]))
PY
  holder=$!
  for _ in $(seq 100); do
    grep -q holding "$work/holder.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "apt_lock_test: the lock holder did not start" >&2
  exit 1
}

fail() {
  echo "apt_lock_test: FAILED: $*" >&2
  exit 1
}

# 1. The dpkg lock held for 6 s (install's lock): `apt-get check`, which takes
#    the same lock and changes nothing, waits, says so once, then succeeds.
hold 6 /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock
start=$SECONDS
status=0
WANTRAIN_APT_LOCK_TIMEOUT=60 "$apt_waiting" check -q >"$work/1.out" 2>&1 || status=$?
took=$((SECONDS - start))
cat "$work/1.out"
[ "$status" -eq 0 ] || fail "check under a held lock ended with status $status"
[ "$(grep -c '^apt-get-waiting: waiting for the package lock, up to 60 s: Could not get lock /var/lib/dpkg/lock-frontend' "$work/1.out")" -eq 1 ] ||
  fail "no single line saying it waits for /var/lib/dpkg/lock-frontend"
grep -q "held by process $holder (python3)" "$work/1.out" || fail "the line does not name the holder (process $holder)"
[ "$took" -ge 4 ] || fail "it took ${took} s: it did not wait for the lock"
wait "$holder" || true
holder=

# 2. `update` waits for the lists lock too (apt's own DPkg::Lock::Timeout does
#    not cover it); held past the limit it is one line and apt's status 100.
hold 30 /var/lib/apt/lists/lock
status=0
WANTRAIN_APT_LOCK_TIMEOUT=3 "$apt_waiting" update -q >"$work/2.out" 2>&1 || status=$?
cat "$work/2.out"
[ "$status" -eq 100 ] || fail "update under a lock held past the limit ended with status $status, not 100"
[ "$(grep -c '^apt-get-waiting: the package lock is still held after 3 s (Could not get lock /var/lib/apt/lists/lock. It is held by process '"$holder"' (python3))' "$work/2.out")" -eq 1 ] ||
  fail "no single line naming the lists lock, its holder and the limit"
grep -q '^E: ' "$work/2.out" && fail "apt's own lock errors were shown as well"

# 3. A limit that is no number is refused before apt-get runs.
status=0
WANTRAIN_APT_LOCK_TIMEOUT=soon "$apt_waiting" update -q >"$work/3.out" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q '^apt-get-waiting: WANTRAIN_APT_LOCK_TIMEOUT=soon: not a number of seconds$' "$work/3.out" ||
  fail "a bad limit: status $status, $(cat "$work/3.out")"
echo "apt_lock_test: ok"
