#!/usr/bin/env bash
# Runs every test binary that `cargo test --workspace --lib --bins --tests` runs, but BINARIES
# of them at a time instead of one after another (each still runs its own tests
# RUST_TEST_THREADS at a time). Most of a test's time is waiting (holds, restarts, probes), so
# on 2 cores two binaries at once finish in about 60 % of the time one after the other does.
#
# Each binary is the one `cargo test --workspace --no-run` built, run from its package's
# directory as cargo runs it (running each through `cargo test -p` instead would build the
# crate again with that package's features alone). Its output goes to a file and is printed in
# one piece when it finishes, so the log reads as cargo's does. At the end: one line per binary
# (result, seconds), the failed ones again, and exit 101 if any failed, as
# `cargo test --no-fail-fast` does.
#
# FIRST names binaries to start before the others (the longest ones: starting them last would
# leave one running alone at the end).
set -euo pipefail

cargo=${CARGO:-cargo}
binaries=${BINARIES:-2}
first=${FIRST:-}
work=$(mktemp -d)
# On an abort (a CI's timeout, Ctrl-C) the binaries still running have printed nothing yet:
# their output so far is printed before it goes.
on_exit() {
  for log in "$work"/run.*; do
    [ -e "$log" ] || continue
    echo "=== unfinished: $(head -1 "$log")"
    tail -n +2 "$log"
  done
  rm -rf "$work"
}
trap on_exit EXIT
: > "$work/results"

# One line per test binary, tab-separated: target name, package directory, what cargo calls it
# ("tests/clocks.rs", "unittests src/lib.rs"), executable; in cargo's order. Built here, with
# the workspace's features, exactly as `cargo test --workspace` builds them.
$cargo test --offline --workspace --lib --bins --tests --no-run --message-format=json |
  python3 -c '
import json, os, sys
seen = set()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test") or not m.get("executable"):
        continue
    t = m["target"]
    pkg = os.path.dirname(m["manifest_path"])
    src = os.path.relpath(t["src_path"], pkg)
    label = src if t["kind"][0] == "test" else "unittests " + src
    if m["executable"] not in seen:
        seen.add(m["executable"])
        print(t["name"], pkg, label, m["executable"], sep="\t")
' > "$work/all"

# FIRST's binaries first, in FIRST's order, then the rest in cargo's.
: > "$work/ordered"
for name in $first; do
  grep -P "^$name\t[^\t]*\ttests/" "$work/all" >> "$work/ordered" || {
    echo "run-test-binaries: FIRST names $name, which is no integration test binary" >&2
    exit 2
  }
done
grep -vxF -f "$work/ordered" "$work/all" >> "$work/ordered" || true
echo "run-test-binaries: $(wc -l < "$work/ordered") test binaries, $binaries at a time"

# Runs one binary as cargo would: from its package's directory. Cargo's runtime variables that
# tests read have fallbacks (CARGO_BIN_EXE_*, tests/support's operator_bin).
run_one() {
  local name dir label exe
  IFS=$'\t' read -r name dir label exe <<< "$1"
  local log
  log=$(mktemp -p "$work" run.XXXXXX)
  local start=$SECONDS rc=0
  {
    echo "     Running $label ($exe)"
    (cd "$dir" && exec "$exe")
  } > "$log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  local verdict=ok
  [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
  local where=${dir#"$PWD"}
  {
    flock 9
    echo "=== ${where#/}${where:+ }$label: $verdict, ${took} s"
    cat "$log"
    printf '%s\t%s\t%s\n' "$verdict" "$took" "${where#/}${where:+ }$label" >> "$work/results"
  } 9> "$work/print.lock"
  rm -f "$log"
}
export -f run_one
export work

started=$SECONDS
# xargs -P keeps BINARIES running; a failed binary does not stop the others.
tr '\n' '\0' < "$work/ordered" | xargs -0 -P "$binaries" -n1 bash -c 'run_one "$1"' _ || true

echo
echo "run-test-binaries: $(wc -l < "$work/results") binaries in $((SECONDS - started)) s, $binaries at a time; per binary (seconds, longest first)"
sort -t$'\t' -k2,2nr "$work/results" | awk -F'\t' '{printf "  %5d s  %-4s %s\n", $2, ($1=="ok"?"ok":"FAIL"), $3}'
expected=$(wc -l < "$work/ordered")
finished=$(wc -l < "$work/results")
failed=$(grep -vc '^ok' "$work/results" || true)
if [ "$finished" != "$expected" ]; then
  echo "run-test-binaries: only $finished of $expected binaries reported a result" >&2
  exit 101
fi
if [ "$failed" != 0 ]; then
  echo "error: $failed target(s) failed:"
  grep -v '^ok' "$work/results" | cut -f3 | sed 's/^/    /'
  exit 101
fi
