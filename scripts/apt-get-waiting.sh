#!/usr/bin/env bash
# apt-get that waits for the package lock instead of failing at once. On a
# fresh cloud machine the unattended upgrades at boot usually hold it, and
# apt-get then stops with "Could not get lock" and status 100 (its
# DPkg::Lock::Timeout covers the dpkg lock of `install`, not the lists lock
# of `update`). This runs apt-get again every 2 s while the only error is a
# held lock, for at most WANTRAIN_APT_LOCK_TIMEOUT seconds (default 600),
# and says once whom it waits for.
# Usage: scripts/apt-get-waiting.sh APT-GET-ARGUMENTS...   (as root)
set -uo pipefail
limit=${WANTRAIN_APT_LOCK_TIMEOUT:-600}
case "$limit" in
'' | *[!0-9]*)
  echo "apt-get-waiting: WANTRAIN_APT_LOCK_TIMEOUT=$limit: not a number of seconds" >&2
  exit 2
  ;;
esac
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
start=$SECONDS
said=
while :; do
  apt-get "$@" 2>"$errors"
  status=$?
  held=$(grep -m1 -o 'Could not get lock .*' "$errors")
  if [ "$status" -eq 0 ] || [ -z "$held" ]; then
    cat "$errors" >&2
    exit "$status"
  fi
  if [ $((SECONDS - start)) -ge "$limit" ]; then
    echo "apt-get-waiting: the package lock is still held after ${limit} s ($held); run again once it is free, or wait longer with WANTRAIN_APT_LOCK_TIMEOUT=SECONDS" >&2
    exit "$status"
  fi
  if [ -z "$said" ]; then
    echo "apt-get-waiting: waiting for the package lock, up to ${limit} s: $held"
    said=1
  fi
  sleep 2
done
