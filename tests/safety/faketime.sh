#!/usr/bin/env bash
# Clock-jump scenario of the safety suite (not part of pass/fail; see docs/safety.md "Clock jumps").
#
# Redis expires keys by its host's wall clock (gettimeofday). A *step* of that clock (an
# operator's `date -s`, a VM resumed with a stale clock corrected at once, NTP stepping
# instead of slewing) makes keys expire early, and no server-side rule — fence, hold or
# otherwise — can see it. This script shows it on three plain redis-server processes, two of
# them under libfaketime with an offset read from a file:
#   1. client A takes `lock` with SET NX PX 10000 on all three (3 of 3: it holds the lock for
#      ~10 s by Redlock's rules);
#   2. the clocks of servers 0 and 1 jump 60 s forward;
#   3. client B asks for the same lock 1 s later and gets servers 0 and 1: a quorum of 2 of 3.
#      Two holders inside A's validity.
#
# Needs libfaketime (Debian: faketime) and a redis-server that runs under it. Debian's
# redis-server is linked with jemalloc, whose initialisation calls clock_gettime() before
# libfaketime is initialised; libfaketime then aborts the process ("Unexpected recursive calls
# to clock_gettime()"). The script detects that, says so, and exits 77 (skipped). Point
# REDIS_SERVER at a redis-server built with MALLOC=libc to see the scenario run.
set -euo pipefail

# The MALLOC=libc build of tests/tools/build-redis-libc.sh (`make redis-libc`) when it exists.
libc_build=$(ls -d "$HOME"/.cache/redlock-operator/redis-libc/*/redis-server 2>/dev/null | tail -1 || true)
REDIS_SERVER=${REDIS_SERVER:-${libc_build:-redis-server}}
LIB=${FAKETIME_LIB:-/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1}
[ -f "$LIB" ] || { echo "libfaketime not found at $LIB (apt-get install faketime)"; exit 77; }

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ports=("$(port)" "$(port)" "$(port)")
cli() { redis-cli -p "$1" "${@:2}"; }

for i in 0 1 2; do
  args=(--bind 127.0.0.1 --port "${ports[$i]}" --save "" --appendonly no)
  if [ "$i" -lt 2 ]; then
    echo "+0" > "$dir/offset$i"
    env LD_PRELOAD="$LIB" FAKETIME_TIMESTAMP_FILE="$dir/offset$i" FAKETIME_NO_CACHE=1 \
      FAKETIME_DONT_FAKE_MONOTONIC=1 "$REDIS_SERVER" "${args[@]}" > "$dir/redis$i.log" 2>&1 &
  else
    "$REDIS_SERVER" "${args[@]}" > "$dir/redis$i.log" 2>&1 &
  fi
  pids+=($!)
done

for i in 0 1 2; do
  for _ in $(seq 50); do
    [ "$(cli "${ports[$i]}" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  if [ "$(cli "${ports[$i]}" ping 2>/dev/null)" != PONG ]; then
    echo "redis-server $i did not start under libfaketime:"
    sed 's/^/  /' "$dir/redis$i.log" | head -5
    if grep -q "recursive calls to clock_gettime" "$dir/redis$i.log"; then
      echo "SKIPPED: this redis-server (jemalloc) cannot run under libfaketime; set REDIS_SERVER to a"
      echo "redis-server built with MALLOC=libc to run the scenario."
      exit 77
    fi
    exit 1
  fi
done

votes() { # votes <value>: how many servers accepted SET lock <value> NX PX 10000
  local n=0
  for p in "${ports[@]}"; do
    [ "$(cli "$p" set lock "$1" NX PX 10000)" = OK ] && n=$((n + 1))
  done
  echo "$n"
}

a=$(votes A)
echo "client A: $a of 3 votes (quorum 2): A holds the lock for ~10 s"
echo "+60" > "$dir/offset0"
echo "+60" > "$dir/offset1"
echo "the wall clocks of servers 0 and 1 jump 60 s forward"
sleep 1
b=$(votes B)
echo "client B, 1 s later: $b of 3 votes"
if [ "$a" -ge 2 ] && [ "$b" -ge 2 ]; then
  echo "RESULT: two holders of one lock inside A's validity: a clock step breaks Redlock, fenced or not."
  exit 0
fi
echo "RESULT: no second holder (unexpected for a working libfaketime)"
exit 1
