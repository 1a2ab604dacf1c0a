#!/usr/bin/env bash
# `make soak`: the integration suite RUNS (5) times in a row with LOAD busy processes per core
# (1) spinning at normal priority for the whole run, as a loaded CI machine would, and then
# one line per test: how many runs it passed. A test that fails once here is a bug until its
# cause is found (DEVELOPERS.md); the logs of every run stay in OUT (target/soak/).
#
# Runs inside the run's namespaces like `make test` (the Makefile calls it through
# in-namespaces); TESTS chooses binaries (e.g. "lifecycle partitions"; default: all that
# run-test-binaries.sh runs).
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${RUNS:-5}
load=${LOAD:-1}
out=${OUT:-target/soak}
mkdir -p "$out"
rm -f "$out"/run-*.log

busy=()
stop_load() {
  for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${busy[@]}"; do wait "$pid" 2>/dev/null || true; done
  busy=()
}
trap stop_load EXIT

for run in $(seq 1 "$runs"); do
  n=$(( $(nproc) * load ))
  for _ in $(seq 1 "$n"); do
    sh -c 'while :; do :; done' &
    busy+=("$!")
  done
  echo "soak: run $run of $runs with $n busy processes"
  if [ -n "${TESTS:-}" ]; then
    only=()
    for t in $TESTS; do only+=(--test "$t"); done
    ${CARGO:-cargo} test --offline --no-fail-fast "${only[@]}" > "$out/run-$run.log" 2>&1 || true
  else
    tests/tools/run-test-binaries.sh > "$out/run-$run.log" 2>&1 || true
  fi
  stop_load
  echo "soak: run $run: $(grep -c ' \.\.\. ok$' "$out/run-$run.log" || true) passed, $(grep -c ' \.\.\. FAILED$' "$out/run-$run.log" || true) failed"
done

# Per test: passes of runs. A test binary's lines are "test <name> ... ok|FAILED".
python3 - "$out" "$runs" <<'PY'
import collections, glob, re, sys
out, runs = sys.argv[1], int(sys.argv[2])
passed, seen = collections.Counter(), collections.Counter()
binary = ""
for path in sorted(glob.glob(f"{out}/run-*.log")):
    for line in open(path, errors="replace"):
        m = re.match(r"\s*Running (\S+)", line)
        if m:
            binary = m.group(1)
        m = re.match(r"test (\S+) \.\.\. (ok|FAILED)$", line.strip())
        if m and binary.startswith("tests/"):
            key = f"{binary} {m.group(1)}"
            seen[key] += 1
            passed[key] += m.group(2) == "ok"
width = max((len(k) for k in seen), default=10)
print(f"{'test':<{width}}  passed")
for key in sorted(seen):
    flag = "" if passed[key] == seen[key] == runs else "   <-- not every run"
    print(f"{key:<{width}}  {passed[key]}/{seen[key]}{flag}")
bad = [k for k in seen if passed[k] != runs]
sys.exit(1 if bad else 0)
PY
